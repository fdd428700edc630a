"""Natural text of four kinds for the benchmark corpus (benchmarks/inputs.py), written for attnflow and
redistributable with it (the project's licence). ``code`` is attnflow's own source, read at run time.

Each kind is long enough for 512 MiniLM or SmolLM2 tokens; shorter inputs take its beginning.
"""

from __future__ import annotations

import inspect

PROSE = """\
The ferry to the island left twice a day, once at dawn and once in the late afternoon, and in winter the
afternoon boat was often cancelled without notice. Marta had learned to carry a book, a thermos of tea and
a spare pair of socks, because the waiting room at the pier had a broken heater and a bench that nobody had
painted since her grandfather worked on the docks. She did not mind the waiting. It was the only hour of the
week when nobody could ask her for anything, when the phone lost its signal behind the breakwater and the
gulls argued over the fish scraps the trawlers threw back.

Her brother thought she was foolish to keep the house on the island. The roof leaked over the kitchen, the
well pump failed every second summer, and the nearest doctor was forty minutes away by boat, if the boat
was running. He had offered, more than once, to find a buyer from the mainland, one of those couples who
wanted a quiet place for weekends and would pay for the view without asking about the pump. Marta always
said she would think about it, and then she would go back on the Friday boat and spend the weekend
scraping old paint from the shutters.

What she could not explain to him was the way the light changed in March. For most of the winter the
island was grey on grey, the sea the colour of wet slate and the sky only a little paler, and then one
morning the wind would turn to the south and everything would look freshly washed. The gorse came into
flower on the hill behind the chapel, the fishermen started to repair their nets on the quay, and the
schoolteacher, who had been on the island longer than anyone could remember, would open every window of
the schoolhouse and let the children run outside at noon.

That spring the teacher announced that she would retire at the end of the year. There were only six
pupils left, and the council had written twice to say that the school could not stay open with fewer than
eight. At the meeting in the chapel hall people spoke about the ferry timetable, the price of diesel and
the new houses that stood empty for ten months of the year. Marta listened and said nothing until the very
end, when she stood up, surprised at herself, and said that she had trained as a teacher before she went
to work for the shipping company, and that she would take the post if nobody else wanted it.

Her brother did not speak to her for a week. Then he sent a parcel with a new thermos, a box of chalk and
a note that said only that the heater in the waiting room would not fix itself, and that she should ask
the harbour master, who owed their father a favour, to look at it before the autumn storms arrived."""

DIALOGUE = """\
"Are you sure this is the right road?" asked Priya, holding the map upside down.
"No," said Tom. "But it is the only road, so it has to be the right one."
"That is not how roads work. There was a junction about three kilometres back."
"There was a farm track. Farm tracks do not count."
"It had a signpost, Tom. Signposts count."
"What did the signpost say, then?"
"I don't know, I was looking at the map."
"Which you are holding upside down."
"It is easier to read this way when we are driving south. Everything is on the correct side."
"Fine. Where are we on your upside-down map?"
"Somewhere between the reservoir and the forest. Probably near the forest, because there are trees."
"There are trees everywhere in this county. Can you see a church? The guidebook said to turn left after
the church with the square tower."
"I can see a cow. Two cows. Quite a lot of cows, actually. No church."
"Right. I am stopping at the next house and asking for directions."
"You never ask for directions. You said once that asking for directions was admitting defeat."
"I was twenty-two and I had a car with no reverse gear. Things change."
"Look, there is somebody at the gate. Wind down your window."
"Excuse me! Good afternoon. We are trying to find the old mill, the one that has been turned into a
museum. Are we on the right road?"
"The mill? You are on the right road, but you are going the wrong way. Turn around, go back past the
reservoir and take the farm track with the signpost. It is about five minutes from there."
"Thank you, that is very kind. Have a good afternoon."
"Don't say anything, Priya."
"I didn't say anything."
"You were thinking it very loudly."
"I was thinking that the cows were quite handsome, that is all. And that signposts count."
"Is the museum open on Sundays, at least?"
"The guidebook says it opens at two and closes at five, except in August, when it opens at ten."
"It is ten to five."
"Then you had better drive a little faster, and I will hold the map the right way up."
"Deal. Tell me if you see the signpost again."
"I will read it out loud this time, I promise, every single word on it."
"And after the museum, dinner? There was a pub by the reservoir with a garden and a blackboard menu."
"Only if you let me choose the table. Last time you sat us next to the kitchen door for two hours."
"The kitchen door was warm. It was November."
"It was July, Tom."\
"""


def code_text() -> str:
    """Python source: attnflow's rollout and fusion modules (the project's own code)."""
    from attnflow.core import fusion, rollout

    return inspect.getsource(rollout) + "\n" + inspect.getsource(fusion)


ITEMS = ("flour", "rice", "lentils", "olive oil", "tinned tomatoes", "onions", "garlic", "carrots", "potatoes",
         "apples", "pears", "lemons", "milk", "butter", "eggs", "cheddar", "yoghurt", "bread", "oats", "coffee",
         "tea bags", "honey", "salt", "pepper", "cumin", "paprika", "spinach", "peas", "chickpeas", "pasta",
         "washing-up liquid", "bin bags", "light bulbs (E27, warm white)", "batteries (AA)", "string", "stamps",
         "envelopes", "notebook", "pencils", "tape", "sponges", "matches", "candles", "dog food", "birdseed",
         "compost (40 l)", "tomato seedlings", "garden twine", "secateurs (ask about sharpening)", "slug pellets",
         "wood glue", "sandpaper (fine)", "picture hooks", "a 5 mm drill bit", "plasters", "sun cream")
UNITS = ("1 kg", "500 g", "2 packs", "a dozen", "1 litre", "3", "6", "250 g", "2 tins", "1 bottle", "a bunch", "4")
SHOPS = ("market", "corner shop", "hardware store", "post office", "supermarket")


def list_text() -> str:
    """A shopping list: numbered items, quantities, shops and notes (deterministic)."""
    lines = ["Shopping list for the week (check the cupboard first!)", ""]
    for i, item in enumerate(ITEMS):
        unit = UNITS[(7 * i + 3) % len(UNITS)]
        shop = SHOPS[(3 * i + 1) % len(SHOPS)]
        note = " - only if on offer" if i % 5 == 2 else " - the brand Anna likes" if i % 7 == 4 else ""
        lines.append(f"{i + 1}. {item}: {unit}, {shop}{note}")
    return "\n".join(lines)


KINDS = ("prose", "dialogue", "code", "list")


def text(kind: str) -> str:
    if kind == "prose":
        return PROSE
    if kind == "dialogue":
        return DIALOGUE
    if kind == "code":
        return code_text()
    if kind == "list":
        return list_text()
    raise ValueError(f"kind must be one of {KINDS}; got {kind!r}")
