"""The workload the benchmark scripts share: generated support tickets of 40 to 300 words, the
question sets of 1, 4 and 10 questions, and how two runs' answers are compared (argmax
agreement, over every answer and the decisive ones, and the largest probability gap)."""
from __future__ import annotations

import random
from typing import Any, Dict, List

from laya_edge.export.verify import TIE_MARGIN

DEPARTMENTS = {
    "billing": ["I was charged twice for my subscription this month",
                "the invoice shows a fee I never agreed to",
                "my card was billed after I cancelled the plan",
                "the refund you promised has still not arrived"],
    "technical": ["the app crashes every time I open the reports page",
                  "I cannot log in since the last update, it says my token expired",
                  "the export to CSV produces an empty file",
                  "sync between the desktop and mobile apps stopped working"],
    "shipping": ["my parcel has been stuck in transit for nine days",
                 "the tracking number you sent does not exist",
                 "the box arrived damaged and two items are missing",
                 "the courier left the package at the wrong address"],
    "account": ["I need to change the e-mail address on my account",
                "please delete my account and all data you hold about me",
                "someone else seems to have access to my profile",
                "I want to add two colleagues to our team workspace"],
    "sales": ["we are considering the enterprise plan for forty seats",
              "can you send a quote for an annual licence with support",
              "is there a discount for non-profit organisations",
              "we would like a demo of the analytics module next week"],
}
URGENCY = ["This is urgent, we have a deadline tomorrow morning.",
           "No rush, whenever you get a chance.",
           "Please treat this as a priority, it blocks our whole team.",
           "I have been waiting for days and nobody answers.",
           "It is not critical but it is annoying."]
MOOD = ["I am really disappointed with how this has been handled.",
        "Thanks for your help, your team has always been great.",
        "If this is not fixed this week I will cancel and move to a competitor.",
        "I am sure it is just a small mix-up.",
        "Frankly this is unacceptable for a paid service."]
FILLER = ["I tried restarting and clearing the cache as suggested in the help centre.",
          "Our company has used your product for about three years.",
          "I attached a screenshot of the error message and the order confirmation.",
          "My colleague had the same issue last month and it was solved by support.",
          "The order number is 48213 and the account is registered under my work address.",
          "I called the hotline yesterday but the line was busy for an hour.",
          "We use the service in four offices across two countries.",
          "I read the documentation twice but could not find anything about this case.",
          "Last time a similar ticket took two weeks to be resolved.",
          "Could you also confirm whether this affects our other subscriptions?"]

QUESTIONS10 = {
    "department": {"type": "choice", "instructions": "Which team should handle this ticket?",
                   "criteria": {"billing": "payments, invoices, refunds",
                                "technical": "bugs, errors, login problems",
                                "shipping": "deliveries, parcels, tracking",
                                "account": "profile, access, data requests",
                                "sales": "quotes, plans, demos"}},
    "urgent": {"type": "noul", "instructions": "The customer needs an answer today."},
    "anger": {"type": "score", "instructions": "How upset is the customer?",
              "criteria": ["calm", "annoyed", "angry", "furious"]},
    "refund": {"type": "noul", "instructions": "The customer asks for money back."},
    "churn": {"type": "score", "instructions": "How likely is the customer to leave?",
              "criteria": ["unlikely", "possible", "likely"]},
    "channel": {"type": "choice", "instructions": "How should we reply?",
                "criteria": ["email", "phone call", "in-app message"]},
    "escalate": {"type": "noul", "instructions": "A manager should look at this."},
    "priority": {"type": "score", "instructions": "Ticket priority",
                 "criteria": ["P4", "P3", "P2", "P1"]},
    "product": {"type": "choice", "instructions": "Which product is concerned?",
                "criteria": ["mobile app", "web dashboard", "api", "hardware", "subscription",
                             "unknown"]},
    "security": {"type": "noul", "instructions": "The ticket reports a security problem."},
}
QUESTIONS1 = {"department": QUESTIONS10["department"]}
QUESTIONS4 = {key: QUESTIONS10[key] for key in ("department", "urgent", "anger", "refund")}


def tickets(count: int, seed: int = 7) -> List[str]:
    """Support tickets of 40 to 300 words, deterministic for a seed."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        department = rng.choice(sorted(DEPARTMENTS))
        target = rng.randint(40, 300)
        sentences = [f"Hello, {rng.choice(DEPARTMENTS[department])}.", rng.choice(URGENCY),
                     rng.choice(MOOD)]
        while sum(len(s.split()) for s in sentences) < target:
            sentences.insert(rng.randint(1, len(sentences)), rng.choice(FILLER + [
                f"Also, {rng.choice(DEPARTMENTS[department])}."]))
        words = " ".join(sentences).split()[:target]
        out.append(" ".join(words))
    return out


def probabilities(answer: Dict[str, Any]) -> List[float]:
    if answer["type"] == "noul":
        return [1.0 - answer["noul"], answer["noul"]]
    return list(answer["probabilities"].values())


def agreement(answers: List[Dict[str, Any]], reference: List[Dict[str, Any]]) -> Dict[str, float]:
    """Argmax agreement with the reference over every answer and over the decisive ones (the
    reference's top two options more than the int8 tie margin apart, as export verification
    counts them), and the largest probability gap."""
    same = total = decisive = decisive_same = 0
    worst = 0.0
    for mine, theirs in zip(answers, reference):
        for qid, expected in theirs.items():
            p, q = probabilities(mine[qid]), probabilities(expected)
            agrees = max(range(len(p)), key=p.__getitem__) == max(range(len(q)), key=q.__getitem__)
            top = sorted(q, reverse=True)
            clear = len(q) < 2 or top[0] - top[1] > TIE_MARGIN["int8"]
            same += agrees
            total += 1
            decisive += clear
            decisive_same += agrees and clear
            worst = max(worst, max(abs(a - b) for a, b in zip(p, q)))
    return {"answers": total, "argmax_agreement": same / max(1, total),
            "decisive_answers": decisive,
            "decisive_agreement": decisive_same / max(1, decisive), "max_abs_p": worst}
