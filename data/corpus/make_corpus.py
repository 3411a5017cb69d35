#!/usr/bin/env python3
"""Writes strata_tales.txt: a self-made corpus (no third-party text, so no licence question) of short
tales built from a small grammar with a fixed seed. Byte-level models learn its spelling, words and
sentence shapes within a few hundred steps. Deterministic: re-running gives the same file."""
import random

rng = random.Random(20240605)
names = ["Ada", "Bram", "Cleo", "Dov", "Edda", "Finn", "Greta", "Hugo", "Iris", "Jonas", "Kira",
         "Lev", "Mara", "Nils", "Olga", "Pia", "Quin", "Rosa", "Sven", "Tove"]
places = ["the mill", "the harbour", "the old library", "the hill farm", "the river bank",
          "the market square", "the lighthouse", "the orchard", "the workshop", "the station"]
things = ["a lantern", "a map", "a loaf of bread", "a brass key", "a letter", "a wooden boat",
          "a jar of honey", "a pair of boots", "a compass", "a basket of apples", "a red scarf"]
verbs = ["found", "carried", "mended", "painted", "hid", "sold", "lost", "borrowed", "gave away",
         "wrapped"]
moods = ["quietly", "slowly", "with great care", "in a hurry", "before dawn", "after supper",
         "in the rain", "without a word"]
weather = ["The wind was cold", "The sun was low", "Fog lay on the water", "Snow had fallen",
           "The rain had stopped", "It was a warm evening"]
thoughts = ["wondered who had left it there", "thought of home", "decided to tell no one",
            "laughed out loud", "began to sing", "counted the steps back", "wrote it all down"]
says = ["\"We should go back,\" said {a}.", "\"Look at this,\" said {a} to {b}.",
        "\"Not yet,\" said {a}, \"not until the bell rings.\"",
        "\"Where did you find it?\" asked {b}.", "\"It belongs to {b},\" said {a}."]


def sentence(a, b):
    k = rng.randrange(6)
    if k == 0:
        return "%s %s %s at %s." % (a, rng.choice(verbs), rng.choice(things), rng.choice(places))
    if k == 1:
        return "%s. %s walked to %s %s." % (rng.choice(weather), a, rng.choice(places),
                                             rng.choice(moods))
    if k == 2:
        return "%s and %s %s %s together." % (a, b, rng.choice(verbs), rng.choice(things))
    if k == 3:
        return "%s %s." % (a, rng.choice(thoughts))
    if k == 4:
        return rng.choice(says).format(a=a, b=b)
    return "At %s, %s met %s, who had %s." % (rng.choice(places), a, b, rng.choice(things))


out = []
n = 0
while sum(len(p) for p in out) < 300_000:
    n += 1
    a, b = rng.sample(names, 2)
    body = " ".join(sentence(a, b) for _ in range(rng.randint(4, 9)))
    out.append("Tale %d.\n%s The end.\n\n" % (n, body))
open("strata_tales.txt", "w").write("".join(out))
