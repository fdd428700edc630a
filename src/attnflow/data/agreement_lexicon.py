"""Word lists for ``attnflow.data.agreement`` (a few hundred words; plain lists so they diff well)."""

_NOUNS = """
key:keys cabinet:cabinets author:authors critic:critics door:doors house:houses boy:boys girl:girls
man:men woman:women child:children teacher:teachers student:students doctor:doctors nurse:nurses
dog:dogs cat:cats horse:horses bird:birds farmer:farmers painter:painters singer:singers
lawyer:lawyers judge:judges player:players coach:coaches pilot:pilots driver:drivers
officer:officers soldier:soldiers king:kings queen:queens prince:princes senator:senators
manager:managers worker:workers friend:friends neighbor:neighbors parent:parents baby:babies
book:books letter:letters picture:pictures table:tables chair:chairs window:windows box:boxes
car:cars bus:buses train:trains boat:boats school:schools church:churches garden:gardens
village:villages city:cities road:roads bridge:bridges river:rivers tree:trees flower:flowers
computer:computers phone:phones report:reports story:stories song:songs film:films idea:ideas
company:companies army:armies committee:committees team:teams office:offices shop:shops
machine:machines engine:engines bottle:bottles cup:cups lamp:lamps wall:walls roof:roofs
"""

_VERBS = """
likes:like praises:praise sees:see knows:know helps:help loves:love hates:hate watches:watch
meets:meet visits:visit admires:admire follows:follow calls:call finds:find remembers:remember
blames:blame trusts:trust fears:fear hears:hear thanks:thank greets:greet avoids:avoid
ignores:ignore describes:describe protects:protect attacks:attack chases:chase supports:support
invites:invite criticizes:criticize teaches:teach pays:pay owns:own needs:need wants:want
builds:build sells:sell buys:buy paints:paint repairs:repair cleans:clean
"""

ADJECTIVES = """
old new big small young tall short red blue green black white happy sad famous quiet loud
strange rich poor clever brave kind angry tired busy lazy friendly dangerous beautiful ugly
expensive cheap broken heavy empty dark bright ancient modern local foreign
""".split()

PREPOSITIONS = "to of near behind beside with under above from for without across".split()

# (pronoun, its verbs) for the optional "they say that" prefix: a pronoun subject whose number
# carries no information about the label.
PREFIXES = [
    ("they", ["say", "think", "know", "believe"]),
    ("we", ["say", "think", "know", "believe"]),
    ("she", ["says", "thinks", "knows", "believes"]),
    ("he", ["says", "thinks", "knows", "believes"]),
]


def _pairs(text: str) -> list[tuple[str, str]]:
    return [tuple(item.split(":")) for item in text.split()]  # type: ignore[misc]


NOUNS = _pairs(_NOUNS)  # (singular, plural)
VERBS = _pairs(_VERBS)  # (agrees with singular, agrees with plural)
