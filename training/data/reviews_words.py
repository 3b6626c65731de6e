"""Word lists of the reviews stand-in: cue words by polarity, negations, fillers, syllables.

Real words give the reviews their shape; names of places, people, streets and dishes are
composed from syllables, which is where the long tail of word types comes from (as in real
reviews, most word types are rare names).
"""

from __future__ import annotations


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


POSITIVE = _words(
    "delicious amazing friendly fresh perfect excellent great fantastic wonderful attentive cozy "
    "tasty generous reasonable clean quick flavorful awesome outstanding lovely superb crispy juicy "
    "helpful pleasant solid impressive incredible spotless welcoming charming tender authentic "
    "gorgeous phenomenal courteous satisfying heavenly"
)
NEGATIVE = _words(
    "bland rude cold stale terrible awful horrible greasy overpriced slow dirty soggy disappointing "
    "mediocre dry burnt salty tasteless inattentive noisy cramped gross sloppy undercooked lukewarm "
    "pathetic chewy watery sticky unprofessional dismissive filthy rubbery dreadful sour careless "
    "forgettable miserable"
)
# Negated verb phrases put in front of a cue word flip what it means: "not friendly" is a complaint.
NEGATED_VERBS = (
    "was not",
    "was never",
    "was hardly",
    "wasnt exactly",
    "was not at all",
    "was far from",
    "was anything but",
    "is not",
    "did not seem",
    "didnt taste",
    "never felt",
    "was not really",
)
VERBS = ("was", "was", "is", "seemed", "tasted", "felt", "looked", "turned out")
INTENSIFIERS = (
    "really",
    "very",
    "super",
    "incredibly",
    "pretty",
    "quite",
    "so",
    "truly",
    "honestly",
    "rather",
    "extremely",
    "absolutely",
    "",
    "",
    "",
)
HEDGES = (
    "to be honest",
    "if you ask me",
    "for the price",
    "for what it is",
    "this time",
    "as always",
    "surprisingly",
    "as expected",
    "believe it or not",
    "compared to last time",
    "from what i could tell",
    "for a weeknight",
    "",
    "",
)

FOODS = _words(
    "burger fries pizza pasta salad soup steak tacos burrito sushi ramen curry sandwich wings ribs "
    "brisket noodles dumplings pancakes waffles omelette bagel croissant cheesecake tiramisu gelato "
    "lasagna risotto gnocchi paella pho bibimbap falafel hummus kebab gyro nachos quesadilla "
    "enchiladas calamari oysters scallops salmon shrimp lobster crab chicken pork lamb duck tofu "
    "brownie pie"
)
INGREDIENTS = _words(
    "garlic truffle spicy smoked grilled fried roasted lemon ginger basil chipotle honey mango "
    "coconut sesame teriyaki buffalo cajun pesto parmesan mushroom bacon avocado jalapeno cheddar "
    "miso kimchi chili herb butter maple caramel pistachio"
)
DRINKS = _words("coffee latte espresso tea lemonade margarita mojito beer wine sangria smoothie cocktail")
STAFF = _words("server waiter waitress bartender hostess manager cashier staff chef owner barista")
ASPECTS = tuple(
    "the " + aspect
    for aspect in _words(
        "service ambiance decor music patio parking bathrooms prices portions wait line seating "
        "lighting menu atmosphere location tables delivery takeout presentation"
    )
)
PLACES = _words(
    "restaurant diner bistro cafe grill bar bakery pizzeria taqueria brewery kitchen eatery tavern "
    "noodle-house steakhouse deli buffet food-truck lounge cantina"
)
MEALS = _words("breakfast brunch lunch dinner snack dessert happy-hour late-night")
DAYS = _words("monday tuesday wednesday thursday friday saturday sunday weekend holiday")
COMPANIONS = _words(
    "wife husband boyfriend girlfriend mom dad sister brother kids coworkers friends family roommate "
    "neighbor boss in-laws grandparents"
)
EVENTS = (
    "the game",
    "a concert",
    "work",
    "a long hike",
    "the movies",
    "church",
    "a birthday party",
    "a wedding",
    "the airport",
    "a conference",
    "the farmers market",
    "a show",
    "soccer practice",
    "a doctors appointment",
    "a road trip",
    "graduation",
)
FIRST_NAMES = _words(
    "james mary john patricia robert jennifer michael linda william elizabeth david barbara richard "
    "susan joseph jessica thomas sarah charles karen chris nancy daniel lisa matthew betty anthony "
    "sandra mark ashley steven kim paul emily andrew donna josh michelle kevin carol brian amanda "
    "george melissa tim deborah ron stephanie jason rebecca ed laura jeff sharon ryan cynthia jacob "
    "kathleen gary amy nick angela eric shirley jon anna stephen brenda larry pamela justin emma "
    "scott nicole brandon helen ben samantha sam katherine greg christine frank debra alex rachel ray "
    "carolyn pat janet jack maria dennis heather jerry diane tyler ruth aaron julie jose olivia adam "
    "joyce henry virginia"
)
STREETS = _words("street avenue boulevard road lane drive plaza square mall center strip")
CITIES = _words("downtown uptown midtown the-east-side the-west-end old-town the-strip the-suburbs")
# Syllables for names: consonant-vowel pieces that read like made-up names (tavrino, belmaro).
ONSETS = (
    "b",
    "c",
    "d",
    "f",
    "g",
    "h",
    "j",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "w",
    "z",
    "br",
    "ch",
    "cl",
    "dr",
    "fl",
    "gr",
    "kr",
    "pl",
    "sh",
    "st",
    "tr",
    "th",
    "sl",
    "qu",
)
VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "io", "ou", "y")
CODAS = ("", "", "n", "r", "l", "s", "m", "x", "nd", "rt", "ll", "st", "no", "ra", "to", "co")
