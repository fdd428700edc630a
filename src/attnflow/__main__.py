from attnflow.cli import main

main()
