"""The decoder study's prompts: five kinds, written by hand (not templates), 14 each.

Every third prompt of a kind (index 2, 5, 8, ...) is held out: the study picks the recommended
method on the other prompts ("dev") and reports the held-out ones separately, so a choice that only
fits the prompts it was made on shows up. The explained output is whatever token the model predicts
after the prompt (its argmax), as `attnflow explain` does; no prompt is dropped.
"""

from __future__ import annotations

KINDS: dict[str, list[str]] = {
    # Subject-verb agreement across attractors, clauses and inversions: the number lives on one noun.
    "agreement": [
        "The keys to the old wooden cabinet",
        "The author of the famous novels",
        "Every student in the three classes",
        "The pictures that my grandmother painted last summer",
        "The dog that chased the cats across the yard",
        "Near the river, the houses built by the company",
        "The list of ingredients for the cakes",
        "My neighbours, who moved here from Spain,",
        "The boy with the two big brown dogs",
        "Only one of the many candidates who applied",
        "The results of the long experiment",
        "The teachers at the small village school",
        "A bottle of the finest French wines",
        "The bridges over the wide river",
    ],
    # Pronouns and coreference: who is the referent, and which pronoun form follows.
    "pronoun": [
        "Mary lent John her bike because he had lost his. The next day John gave it back to",
        "When the doctor met the nurse, she told him that",
        "Peter called his sister to ask whether",
        "The girls finished their homework, and then",
        "Tom thanked Anna for the present that",
        "After Lucy and Mark got married, the couple moved to a house that",
        "My brother broke his arm, so the doctor told",
        "Emma asked David to hold her coffee while",
        "The king looked at the queen and said that",
        "Sarah wrote to her grandfather because",
        "The students asked the professor whether",
        "James forgot his keys, so his wife had to let",
        "Kate and her mother went shopping, and afterwards",
        "The man told his son that",
    ],
    # Factual recall: the subject entity carries the answer.
    "factual": [
        "The Eiffel Tower is located in the city of",
        "The capital of Japan is",
        "Albert Einstein was born in the country of",
        "The largest planet in our solar system is",
        "William Shakespeare wrote the play Romeo and",
        "The currency of the United Kingdom is the",
        "Water is made of hydrogen and",
        "The Great Wall is a famous landmark in",
        "The author of Harry Potter is J.K.",
        "The chemical symbol for gold is",
        "The Amazon rainforest is mostly in the country of",
        "The first man to walk on the moon was Neil",
        "Mount Everest is the highest mountain in the",
        "The Statue of Liberty stands in the city of New",
    ],
    # Question answering over a short context: the answer sits in the context, far from the end.
    "qa": [
        "Anna lives in Berlin and works as a nurse. Q: Where does Anna live? A: Anna lives in",
        "The meeting was moved to Friday because of the storm. Q: When is the meeting? A: On",
        "Tom has a red car and a blue bike. Q: What colour is Tom's car? A: It is",
        "Our cat is called Whiskers and our dog is called Rex. Q: What is the dog called? A:",
        "The bakery opens at seven and closes at noon. Q: When does it close? A: At",
        "Paul bought three apples and two pears. Q: How many apples did Paul buy? A:",
        "The museum is next to the old train station. Q: Where is the museum? A: Next to the",
        "Lisa plays the violin, and her brother plays the drums. Q: What does Lisa play? A: The",
        "The package was sent from Canada to Brazil. Q: Where was it sent to? A: To",
        "My grandfather was a fisherman in Norway. Q: What was his job? A: He was a",
        "The concert starts at nine, after the dinner. Q: What comes first? A: The",
        "Maria speaks Italian at home and English at work. Q: What does she speak at home? A:",
        "The red box is heavy and the green box is light. Q: Which box is heavy? A: The",
        "Sam was born in Dublin but grew up in London. Q: Where was Sam born? A: In",
    ],
    # Lists and copying: the continuation repeats an earlier item.
    "copying": [
        "apple, banana, cherry, apple, banana,",
        "Monday, Tuesday, Wednesday, Thursday,",
        "red green blue red green",
        "1, 2, 3, 4, 1, 2, 3,",
        "cat dog bird fish cat dog bird",
        "Alice, Bob, Carol. Again: Alice, Bob,",
        "north south east west north south east",
        "The code is X7Q2. Repeat the code: X7",
        "one two three one two",
        "January, February, March, April, May,",
        "Paris, London, Rome, Paris, London,",
        "The password is tulip42. I typed the password: tulip",
        "a b c d e a b c d",
        "Items: pen, cup, lamp. Items again: pen, cup,",
    ],
}


def held_out(index: int) -> bool:
    """Every third prompt of a kind is held out of the choice of the recommended method."""
    return index % 3 == 2


def prompts() -> list[dict]:
    """``[{"kind", "prompt", "split": "dev" | "held-out"}]`` in a fixed order."""
    return [{"kind": kind, "prompt": p, "split": "held-out" if held_out(i) else "dev"}
            for kind, items in KINDS.items() for i, p in enumerate(items)]
