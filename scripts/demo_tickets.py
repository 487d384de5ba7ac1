"""Support tickets with known answers, for training and evaluating the demo checkpoint.

Every ticket is drawn from hidden facts (department, urgency, churn risk, refund request,
sentiment, order number, recurrence) and written out from phrase pools, so each question about it
has a known answer.  Every pool, template, product, name and question wording exists in exactly
one of two *families*: ``train`` or ``heldout``.  Held-out figures therefore measure answers to
wording the model never saw, not recall of training sentences.  English only: the MiniLM
encoder's WordPiece vocabulary is English.

Pure Python (no torch), deterministic for a given seed; ``scripts/train_demo.py`` writes the
rows in the ``{state, questions, expected}`` form upstream ``laya.train`` reads.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

from laya_edge.demo import DEMO_QUESTIONS

FAMILIES = ("train", "heldout")
# The demo's questions (laya_edge.demo.DEMO_QUESTIONS) are what the model is trained to answer.
DEPARTMENTS = tuple(DEMO_QUESTIONS["department"]["criteria"])
URGENCY_LEVELS = tuple(DEMO_QUESTIONS["urgency"]["criteria"])  # "low: no rush", ...
URGENCY = tuple(level.split(":")[0] for level in URGENCY_LEVELS)  # "low", ...
SENTIMENTS = tuple(DEMO_QUESTIONS["sentiment"]["criteria"])

# ------------------------------------------------------------------------------ phrase pools
# {family: [...]}; "{product}", "{n}", "{code}" are filled per ticket.

PRODUCTS = {
    "train": ["subscription", "laptop", "headphones", "phone plan", "coffee machine",
              "software license", "smart watch", "printer", "streaming plan", "camera",
              "vacuum cleaner", "gaming console", "wireless mouse", "smart TV",
              "washing machine", "music subscription", "photo editing app",
              "electric toothbrush", "air purifier", "security camera"],
    "heldout": ["tablet", "speaker", "router", "e-reader", "monitor", "keyboard",
                "cloud storage plan", "espresso grinder", "drone", "fitness tracker"],
}

ISSUES = {
    "billing": {
        "train": ["I was charged twice for my {product}.",
                  "Why was I charged {n} dollars for the {product}?",
                  "The discount on my {product} invoice was never applied.",
                  "My credit card shows two payments for the same {product} order.",
                  "The invoice for my {product} is higher than the price I agreed to.",
                  "You billed me for a {product} I never ordered.",
                  "My {product} renewal was charged even though I turned off auto-renew.",
                  "The last bill for the {product} includes fees nobody explained to me.",
                  "My monthly payment for the {product} went up without any notice.",
                  "I see an unknown charge from your company for the {product}.",
                  "The promo code for the {product} was accepted but the full price was taken.",
                  "Your system took the payment for my {product} two times.",
                  "I cancelled the {product} but you still debited my account.",
                  "The VAT on my {product} invoice is calculated wrongly.",
                  "My {product} bill lists a service I never signed up for.",
                  "The price on my receipt for the {product} is not what the website showed.",
                  "I paid for the {product} with PayPal but the invoice says unpaid.",
                  "There is a late fee on my {product} account although I paid on time.",
                  "My bank shows an extra debit for the {product}.",
                  "The billing address on my {product} invoice is wrong."],
        "heldout": ["There's a duplicate transaction on my bank statement for the {product}.",
                    "I got invoiced two times this month for the {product}.",
                    "The amount you took for the {product} doesn't match the receipt.",
                    "A payment for a {product} I never bought appeared on my statement."],
    },
    "technical support": {
        "train": ["The {product} keeps crashing whenever I open the app.",
                  "My {product} won't turn on since the last update.",
                  "The {product} shows error code {code} and stops working.",
                  "I can't connect my {product} to the Wi-Fi.",
                  "The sync feature on my {product} is broken.",
                  "The screen of my {product} goes black after a few minutes.",
                  "The {product} app shows a blank page after login.",
                  "The battery of my {product} drains in an hour after the update.",
                  "The {product} makes a loud noise and then shuts down.",
                  "Since yesterday the {product} app won't load any data.",
                  "The touchscreen on my {product} stopped responding.",
                  "I get an error message whenever I save settings on the {product}.",
                  "The {product} overheats after ten minutes of use.",
                  "Audio on the {product} cuts out constantly.",
                  "The {product} keeps dropping its network connection.",
                  "Notifications from the {product} app stopped working.",
                  "The {product} is stuck in a restart loop.",
                  "The {product} only shows a grey image since this morning.",
                  "My {product} doesn't recognise the charger anymore.",
                  "The software on my {product} crashes when I print or export."],
        "heldout": ["Every time I start the {product} it freezes on the loading screen.",
                    "After installing the latest firmware the {product} reboots constantly.",
                    "The {product} throws a fatal exception with message {code}.",
                    "Bluetooth pairing with the {product} fails every time."],
    },
    "shipping": {
        "train": ["My {product} still hasn't arrived and it's been {n} days.",
                  "The package with my {product} was delivered to the wrong address.",
                  "The tracking number for my {product} hasn't updated in a week.",
                  "The {product} arrived damaged because the box was crushed.",
                  "I received someone else's order instead of my {product}.",
                  "The delivery driver left my {product} in the rain.",
                  "Half of my {product} order is missing from the package.",
                  "I ordered the {product} two weeks ago and there's no shipping confirmation.",
                  "My {product} was sent to my old address.",
                  "The {product} box was opened and the item inside is missing.",
                  "The estimated delivery date for my {product} keeps moving.",
                  "I paid for express delivery but the {product} is coming by regular post.",
                  "The package came with the wrong {product} inside.",
                  "The tracking page says my {product} went back to the warehouse.",
                  "Nobody rang the bell and now my {product} is at a pickup point far away.",
                  "My {product} shows as shipped but the carrier has no record of it.",
                  "The delivery of my {product} was cancelled without any reason.",
                  "The {product} was left with a neighbour I don't know."],
        "heldout": ["The courier claims my {product} was delivered but nothing is at my door.",
                    "My parcel containing the {product} is stuck at the depot.",
                    "The {product} was smashed during transport.",
                    "Delivery of the {product} is {n} days late."],
    },
    "account access": {
        "train": ["I can't log in to my account because the password reset email never arrives.",
                  "My account got locked after too many login attempts.",
                  "Someone changed the email address on my account without my permission.",
                  "The two-factor code is never accepted when I sign in.",
                  "I forgot my password and the reset page shows an error.",
                  "I can't sign in since you changed the login page.",
                  "My account says it's suspended and I don't know why.",
                  "The login page says my password is wrong even after I reset it.",
                  "I never receive the verification code when I try to log in.",
                  "My account was deactivated and I can't get back in.",
                  "I can't change my password because the old one is not accepted.",
                  "The app logs me out every time and won't let me sign back in.",
                  "Someone else logged into my account and changed my settings.",
                  "I lost the phone number linked to my account and can't log in.",
                  "The security questions for my account don't work.",
                  "I get 'user not found' when I try to log in.",
                  "I need to recover my account but no longer have that email address.",
                  "My login link says it is invalid."],
        "heldout": ["I'm locked out of my profile and the recovery link has expired.",
                    "My username and password stopped working out of nowhere.",
                    "I think my account was hacked, there are sign-ins from another country.",
                    "The verification text never reaches my phone so I can't get into my "
                    "account."],
    },
    "sales": {
        "train": ["I'd like a quote for {n} {product} licenses for my company.",
                  "Do you offer a discount if we buy {n} units of the {product}?",
                  "We're interested in upgrading to the business plan, can someone contact me?",
                  "What's the price of the {product} for a team of {n} people?",
                  "I want to order {n} more {product}s for our office.",
                  "Can I get a price list for your {product} range?",
                  "We plan to buy the {product} for our new branch, who can I talk to?",
                  "Could you send me an offer for the {product} for our whole department?",
                  "Is there an educational discount on the {product}?",
                  "We want to buy {n} {product}s, can you send an offer?",
                  "Which plan would you recommend for a company of {n} employees?",
                  "I'm interested in the premium version of the {product}, what does it cost?",
                  "Can we get a demo of the {product} before we buy?",
                  "Do you have a reseller program for the {product}?",
                  "We would like to place a large order for the {product}.",
                  "How much would an annual contract for the {product} cost us?",
                  "I'd like to buy the {product} for my team, do you have bundles?",
                  "Are there any special offers on the {product} this month?"],
        "heldout": ["Could your sales team send pricing for a bulk order of {n} {product}s?",
                    "Our school wants to buy the {product} for {n} classrooms, what are the "
                    "terms?",
                    "Is there an enterprise tier for the {product}? We have {n} employees.",
                    "I'm considering purchasing the {product}, can you tell me about volume "
                    "pricing?"],
    },
}

URGENCY_PHRASES = {
    "low": {"train": ["No rush on this.", "Whenever you have time is fine.",
                      "It's not urgent at all.", "Just letting you know, it can wait.",
                      "Feel free to get to this next week or later.",
                      "It's a minor thing, nothing is blocked.",
                      "Low priority, I can live with it for now.",
                      "This can wait until next month.", "No need to hurry with this.",
                      "Only when you get around to it.", "There's no deadline on this.",
                      "Not important, just wanted to mention it.",
                      "Handle it whenever it suits you.", "It's fine if this takes a while."],
            "heldout": ["Take your time with this one.", "There's no hurry.",
                        "This is low priority for me."]},
    "medium": {"train": ["Could you look into it this week?",
                         "I'd appreciate a reply in the next few days.",
                         "Please check when you can.",
                         "It would be nice to have this sorted before the weekend.",
                         "It's a bit annoying but I can wait a few days.",
                         "Please handle it within the next couple of days.",
                         "A reply within a few days would be great.",
                         "I'd like this fixed sometime this week.",
                         "Could you get back to me by Friday?",
                         "Sometime in the next days would be good.",
                         "I hope to hear back in a few days.",
                         "Ideally this gets done within the week."],
               "heldout": ["A response sometime this week would be good.",
                           "Please get back to me in a couple of days."]},
    "high": {"train": ["Please fix this today.", "I need this resolved as soon as possible.",
                       "This is urgent, please hurry.",
                       "I need an answer within the next few hours.",
                       "Please make this a priority, I'm stuck until it's fixed.",
                       "It has to be solved before tonight.",
                       "I need help right away.", "Please answer me today.",
                       "This needs attention immediately.",
                       "I can't work until this is fixed, please be quick.",
                       "Time is short, I need this solved now.",
                       "Please get back to me within the hour.",
                       "This really can't wait until tomorrow."],
             "heldout": ["I need a solution by the end of the day.",
                         "Please treat this as a priority.",
                         "Please respond quickly, this is pressing."]},
    "critical": {"train": ["Our entire team is blocked and we are losing money every hour!",
                           "This is an emergency, our business is completely down.",
                           "URGENT: everything has stopped for all of our customers.",
                           "Production is down for everyone, we need help immediately!",
                           "All our stores are offline right now, this is a disaster.",
                           "Thousands of orders are failing as we speak!",
                           "Our whole company is at a standstill!",
                           "Every single one of our customers is affected right now!",
                           "This is a major outage affecting everyone!",
                           "We are losing thousands every minute this is down!",
                           "Nothing works anywhere in our organisation, it's an emergency!",
                           "Our systems are down and our customers can't pay!"],
                 "heldout": ["Hundreds of customers are affected right now and nothing works!",
                             "We cannot take a single order, this is an emergency.",
                             "Critical outage: nobody in the company can work."]},
}

CHURN = {"train": ["If this isn't fixed I'm cancelling my subscription.",
                   "I'm seriously thinking about switching to another provider.",
                   "This is the last straw, I'm closing my account.",
                   "Honestly, I'm about to take my business elsewhere.",
                   "I will not renew my contract after this.",
                   "A competitor already offered me a better deal and I'm tempted to go.",
                   "I'm going to cancel my account if nothing changes.",
                   "I'm looking at your competitors now.",
                   "Don't be surprised if I leave soon.",
                   "I'm about to end my subscription.",
                   "This makes me want to switch providers.",
                   "I'll move to another company if this happens again.",
                   "My patience is gone, I'm cancelling.",
                   "We are thinking about ending our agreement with you."],
         "heldout": ["One more problem like this and I'm leaving for a competitor.",
                     "I'm done with your service and will be terminating my contract.",
                     "We are evaluating other vendors because of this."]}
LOYAL = {"train": ["I've been a happy customer for years.", "I really like your product otherwise.",
                   "I don't want to cancel, I just want it working.",
                   "I'm a loyal customer and want to stay.",
                   "I'm happy with everything else.",
                   "I have no plans to leave, I just need help.",
                   "I've recommended you to friends before.",
                   "Apart from this, I'm very satisfied."],
         "heldout": ["Overall I'm satisfied with your service.", "I'd like to keep using it.",
                     "Cancelling is not what I want, I only need this sorted."]}

REFUND = {"train": ["I want a full refund.", "Please give me my money back.",
                    "Refund the extra charge to my card, please.", "I expect to be reimbursed.",
                    "Please reverse the second charge.", "Send the money back to my card.",
                    "Please refund me.", "Can you pay me back for this?",
                    "I'd like my money returned.", "Please return my payment.",
                    "I'm asking for a full reimbursement.", "I request a refund of the amount.",
                    "I want the charge refunded.", "Please pay back what I was charged."],
          "heldout": ["Kindly return the amount to my account.",
                      "I'd like to get the money back for this.",
                      "Please credit the payment back to me."]}
NO_REFUND = {"train": ["I don't need a refund, just fix it.",
                       "I'm not asking for my money back.", "A refund isn't necessary.",
                       "Please don't refund anything, just solve it.",
                       "Keep the payment, I just want a working product."],
             "heldout": ["No need to return any money, I only want it to work."]}

TONE = {
    "positive": {"train": ["Thanks so much, your team is always great!", "I love your product.",
                           "You've always been very helpful.",
                           "Your service is excellent, keep it up!",
                           "I'm grateful for how quickly you usually respond.",
                           "You guys are fantastic.", "I really appreciate your support team.",
                           "Great service as always!", "Thank you for always being so helpful.",
                           "I'm a big fan of your company.", "Keep up the great work!"],
                 "heldout": ["Your support has been wonderful so far.",
                             "Really appreciate your help, you're the best."]},
    "neutral": {"train": ["Let me know if you need anything else from me.",
                          "I can send more details if needed.",
                          "Please let me know what you need from me.",
                          "I can provide more information if required.",
                          "Feel free to contact me for details.",
                          "You can reach me by email.", "I'll wait for your reply."],
                "heldout": ["Tell me which information you require.",
                            "Screenshots are available on request."]},
    "negative": {"train": ["I'm really frustrated with this.", "This is completely unacceptable.",
                           "I'm very disappointed and angry.",
                           "Your service has been awful lately.",
                           "I'm sick of dealing with these problems.",
                           "I'm extremely annoyed.", "This is really bad service.",
                           "I'm so angry right now.", "Honestly, this is a disgrace.",
                           "I'm deeply unhappy with this.", "What a frustrating experience.",
                           "I've had enough of this nonsense."],
                 "heldout": ["I'm fed up with this terrible service.",
                             "This is ridiculous and annoying."]},
}

GREETINGS = {"train": ["Hi,", "Hello support,", "Dear team,", "Hey there,", "Hello,",
                       "Dear support team,", "Good afternoon,", "Hi team,"],
             "heldout": ["Good morning,", "Hi folks,", "To whom it may concern,"]}
SIGNOFFS = {"train": ["Best, {name}", "Thanks, {name}", "Regards, {name}",
                      "Thank you, {name}", "All the best, {name}", "Best regards, {name}"],
            "heldout": ["Cheers, {name}", "Sincerely, {name}", "Kind regards, {name}"]}
NAMES = {"train": ["Anna", "Mark", "Priya", "Tom", "Lucia", "Kenji", "Sarah", "Omar", "Daniel",
                   "Mia", "Jonas", "Fatima", "Leo", "Chloe"],
         "heldout": ["Elena", "Raj", "Grace", "Victor", "Hana", "Felix"]}
ORDER = {"train": ["My order number is {num}.", "Order #{num}.", "The order ID is {num}.",
                   "My reference number is {num}.", "It's about order {num}."],
         "heldout": ["Reference: {num}.", "The purchase ID is {num}."]}
REPEATED = {"train": ["This is the third time this has happened.",
                      "The same thing happened last month.",
                      "It happened the same way two weeks ago.",
                      "I've had this problem several times now.",
                      "Once again the same issue."],
            "heldout": ["It keeps happening again and again.", "I already reported this once."]}
CONTEXT = {"train": ["I bought it from your online shop last month.",
                     "I use it every day for work.", "We have three of these at the office.",
                     "It was a birthday present.", "I've had it for about a year."],
           "heldout": ["We got it a few weeks ago.", "My whole family relies on it."]}

# ------------------------------------------------------------------------------- questions
# Paraphrases of the main questions per family; index 0 of "train" is DEMO_QUESTIONS' wording.

WORDINGS = {
    "department": {"train": ["Which department should handle this ticket?",
                             "Route this message to the right team.",
                             "Which team is responsible for this request?",
                             "Which team should take this ticket?",
                             "Which department does this belong to?",
                             "Where should this ticket be routed?",
                             "What kind of team needs to handle this message?",
                             "Pick the department for this request.",
                             "Which group should respond to this customer?"],
                   "heldout": ["Who should take care of this customer message?",
                               "Assign the ticket to a department."]},
    "urgency": {"train": ["How urgent is this ticket?", "Rate the urgency of this request.",
                          "How quickly does this need a response?",
                          "What is the urgency level?", "How pressing is this issue?",
                          "How soon must we act on this ticket?",
                          "Rate how urgent the customer's request is."],
                "heldout": ["What priority should this message get?",
                            "How time-critical is the customer's problem?"]},
    "churn_risk": {"train": ["Is the customer at risk of cancelling or leaving?",
                             "Might this customer churn?",
                             "Is the customer likely to leave us?",
                             "Is there a risk we lose this customer?",
                             "Does the customer threaten to cancel?",
                             "Will this customer possibly switch to a competitor?",
                             "Is the customer thinking of quitting our service?"],
                   "heldout": ["Could we lose this customer?",
                               "Is the client likely to end the relationship?"]},
    "refund": {"train": ["Is the customer asking for a refund?",
                         "Does the customer want their money back?",
                         "Does the customer request a refund?",
                         "Is the customer asking to be paid back?",
                         "Does the message ask for money to be returned?",
                         "Is a refund being requested?",
                         "Does the customer want a reimbursement?"],
               "heldout": ["Is a reimbursement requested?",
                           "Does the writer request that money be returned?"]},
    "sentiment": {"train": ["What is the customer's sentiment?",
                            "What is the tone of this message?",
                            "How would you describe the customer's mood?",
                            "What emotion does this message convey?",
                            "Is the tone positive, neutral or negative?",
                            "What is the writer's attitude?",
                            "How does the customer sound?"],
                  "heldout": ["How does the customer feel?",
                              "Which mood does the writer express?"]},
}

# Yes/no statements about the text: (wording, fact name).
STATEMENTS = {
    "train": [("The customer provides an order number.", "order_number"),
              ("An order number is given.", "order_number"),
              ("The message contains an order or reference number.", "order_number"),
              ("The ticket is about a payment problem.", "is_billing"),
              ("This ticket concerns charges or invoices.", "is_billing"),
              ("The customer has a billing question.", "is_billing"),
              ("The customer has a problem with a delivery.", "is_shipping"),
              ("This is about a package or shipment.", "is_shipping"),
              ("The ticket deals with shipping.", "is_shipping"),
              ("The customer cannot access their account.", "is_account"),
              ("This is a login problem.", "is_account"),
              ("The customer is locked out or has a password issue.", "is_account"),
              ("The customer wants to buy something.", "is_sales"),
              ("This is a sales inquiry.", "is_sales"),
              ("The customer asks about prices or a purchase.", "is_sales"),
              ("Something is technically broken.", "is_technical"),
              ("The ticket reports a technical fault.", "is_technical"),
              ("A product or app is not working.", "is_technical"),
              ("The problem has happened before.", "repeated"),
              ("This is not the first time this happened.", "repeated"),
              ("The customer mentions a repeated issue.", "repeated"),
              ("The customer is upset.", "negative"),
              ("The customer is angry or frustrated.", "negative"),
              ("The message has a negative tone.", "negative"),
              ("The customer mentions the {product}.", "mentions_product"),
              ("The ticket refers to the {product}.", "mentions_product"),
              ("The {product} comes up in the message.", "mentions_product")],
    "heldout": [("An order reference is included in the message.", "order_number"),
                ("This is a billing matter.", "is_billing"),
                ("The ticket concerns shipping or delivery.", "is_shipping"),
                ("The user has a login or account security problem.", "is_account"),
                ("The sender is interested in purchasing.", "is_sales"),
                ("A device or app malfunctions.", "is_technical"),
                ("The issue is recurring.", "repeated"),
                ("The writer sounds unhappy.", "negative"),
                ("The {product} is mentioned in the ticket.", "mentions_product")],
}

# Departments under other names, for training only (`rows(..., relabel=True)`): a model that
# meets the five fixed names every time learns them, not to read what an option says, and sits
# near chance on other label sets (models/README.md, "Hand-written tickets"). Relabelled
# questions use a new name per department, a new name with a description, or only descriptions
# behind opaque names. None of these names or descriptions is one of the hand-written
# evaluation set's (models/eval/handwritten.json; tests/test_demo_data.py checks).
# Tried and dropped (2026-12-06, seed 0, default run): eight descriptions per department instead
# of three, and three more opaque name sets, gave held-out department 0.63 (0.93 with these
# pools) and hand-written department 0.71 with names, 0.56 with descriptions only (0.84, 0.62).
# Also dropped (2026-12-06, the 11000-ticket defaults): half of the descriptions composed from
# per-department keyword pools in six formats ("handles {k1}, {k2} and {k3}", "{topic}: ...").
# Generated held-out overall rose from 0.801 to 0.834, but the hand-written set fell: descriptions
# only 0.695 -> 0.644, new names 0.816 -> 0.816, yes/no 0.891 -> 0.879, urgency 0.322 -> 0.241,
# overall 0.684 -> 0.647 with ECE 0.079 -> 0.192: it fitted the generator more closely.
DEPARTMENT_ALIASES = {
    "billing": ["Payments", "Accounts receivable", "Billing desk", "Invoicing", "Money matters",
                "Charges team"],
    "technical support": ["Tech help", "IT support", "Troubleshooting", "Product support",
                          "Engineering", "Hardware and software help"],
    "shipping": ["Logistics", "Dispatch", "Fulfilment", "Orders and delivery", "Shipping desk",
                 "Post and parcels"],
    "account access": ["Login support", "Identity", "Access management", "Password help",
                       "User accounts", "Security"],
    "sales": ["Pre-sales", "Quotes", "New business", "Commercial team", "Purchasing advice",
              "Store"],
}
DEPARTMENT_DESCRIPTIONS = {
    "billing": ["bills, payment problems and unexpected charges",
                "what customers pay: amounts charged, invoices, fees",
                "anything about money already paid or owed"],
    "technical support": ["products or apps that fail, crash or show errors",
                          "faults: something does not work as it should",
                          "bugs, breakdowns and error codes"],
    "shipping": ["orders on their way: delivery, couriers, tracking numbers",
                 "late, lost or damaged shipments",
                 "getting goods to the customer's door"],
    "account access": ["signing in, passwords and security codes",
                       "customers who cannot get into their account",
                       "locked, hacked or compromised accounts"],
    "sales": ["buying: quotes, discounts, new orders",
              "people interested in purchasing something",
              "prices and offers for new customers"],
}
# The refresh's names are also composed (`refresh_rows`): a topic word of the department and a
# unit word that names a part of any department. In the fixed aliases some unit words belong to
# one or two departments ("Billing desk", "Shipping desk", "Charges team"), and a model can learn
# such a word instead of reading the topic; composed names give every unit word to every
# department. The main training's relabelling keeps the fixed aliases only.
DEPARTMENT_TOPICS = {
    "billing": ["Payments", "Invoice", "Billing", "Charges", "Fees", "Money"],
    "technical support": ["Tech", "IT", "Troubleshooting", "Fault", "Hardware", "Software"],
    "shipping": ["Shipping", "Dispatch", "Logistics", "Parcel", "Courier", "Post"],
    "account access": ["Login", "Password", "Access", "Identity", "Credentials", "Authentication"],
    "sales": ["Sales", "Quotes", "Purchasing", "Offers", "New business", "Pre-sales"],
}
UNIT_WORDS = ("desk", "team", "group", "unit", "office", "crew", "line", "squad", "hub", "people")
OPAQUE_NAMES = (("Team A", "Team B", "Team C", "Team D", "Team E"),
                ("Queue 1", "Queue 2", "Queue 3", "Queue 4", "Queue 5"),
                ("Desk X", "Desk Y", "Desk Z", "Desk W", "Desk V"),
                ("Option 1", "Option 2", "Option 3", "Option 4", "Option 5"))
# Urgency levels (lowest first) and sentiment labels (positive, neutral, negative) under other
# names, for the same reason; also none of the hand-written set's.
URGENCY_ALIASES = (("not pressing", "moderate", "pressing", "drop everything"),
                   ("routine", "soon", "urgent", "emergency"),
                   ("can wait", "in a few days", "by tomorrow", "immediately"),
                   ("minor", "normal", "high priority", "critical"),
                   ("later", "within the week", "same day", "this minute"))
SENTIMENT_ALIASES = (("happy", "neutral in tone", "unhappy"),
                     ("satisfied", "calm", "annoyed"),
                     ("content", "businesslike", "frustrated"),
                     ("warm", "plain", "angry"),
                     ("glad", "indifferent", "irritated"))
# More yes/no wordings (the subject as "the writer", "this person", "the client"; other verbs),
# for training only, with `relabel`; none of them the hand-written set's.
REWORDED = {"refund": ["Does the sender want a charge reversed?",
                       "Is the writer after a refund or a credit?",
                       "Does this person want us to give back what they paid?",
                       "Is the client requesting their payment back?",
                       "Do they want to be refunded?"],
            "churn_risk": ["Does the writer say they might stop using us?",
                           "Is this person about to take their business elsewhere?",
                           "Does the sender mention cancelling their account?",
                           "Could this client walk away?",
                           "Do they say they will quit?"]}
RELABEL_RATE = 0.6  # of the training family's department questions, with `relabel`
RENAME_RATE = 0.4   # of its urgency and sentiment questions, with `relabel`

REFUND_RATE = {"billing": 0.6, "shipping": 0.5, "technical support": 0.3, "account access": 0.1,
               "sales": 0.03}


@dataclass(frozen=True)
class Ticket:
    """A generated ticket and the facts it was written from."""

    text: str
    family: str
    product: str
    department: str
    urgency: int
    churn: bool
    refund: bool
    sentiment: str
    order_number: bool
    repeated: bool

    def fact(self, name: str, product: str) -> bool:
        """The truth of a yes/no statement about this ticket."""
        if name.startswith("is_"):
            return self.department.split()[0] == name[3:]
        if name == "negative":
            return self.sentiment == "negative"
        if name == "mentions_product":
            return product == self.product
        return bool(getattr(self, name))


def _fill(rng: random.Random, template: str, product: str, family: str) -> str:
    return template.format(product=product, n=rng.choice((3, 5, 12, 20, 50, 200)),
                           code=rng.choice(("E-%d" % rng.randint(10, 999),
                                            "0x%X" % rng.randint(4096, 65535))),
                           num=rng.randint(10000, 999999), name=rng.choice(NAMES[family]))


def ticket(rng: random.Random, family: str) -> Ticket:
    """One ticket from `family`'s pools, with its facts drawn first and the text written after."""
    department = rng.choice(DEPARTMENTS)
    urgency = rng.randrange(3 if department == "sales" else 4)
    churn = rng.random() < 0.35
    refund = rng.random() < REFUND_RATE[department]
    sentiment = "negative" if churn else rng.choices(SENTIMENTS, (0.3, 0.4, 0.3))[0]
    order_number = rng.random() < 0.5
    repeated = rng.random() < 0.3
    product = rng.choice(PRODUCTS[family])

    middle = [rng.choice(URGENCY_PHRASES[URGENCY[urgency]][family])]
    if repeated:
        middle.append(rng.choice(REPEATED[family]))
    if order_number:
        middle.append(rng.choice(ORDER[family]))
    if rng.random() < 0.3:
        middle.append(rng.choice(CONTEXT[family]))
    if refund:
        middle.append(rng.choice(REFUND[family]))
    elif rng.random() < 0.15:
        middle.append(rng.choice(NO_REFUND[family]))
    if churn:
        middle.append(rng.choice(CHURN[family]))
    elif rng.random() < 0.3 and sentiment != "negative":
        middle.append(rng.choice(LOYAL[family]))
    if sentiment != "neutral" or rng.random() < 0.5:
        if not (churn and rng.random() < 0.5):
            middle.append(rng.choice(TONE[sentiment][family]))
    rng.shuffle(middle)
    parts = [rng.choice(ISSUES[department][family])] + middle
    if rng.random() < 0.8:
        parts.insert(0, rng.choice(GREETINGS[family]))
    if rng.random() < 0.7:
        parts.append(rng.choice(SIGNOFFS[family]))
    text = " ".join(_fill(rng, part, product, family) for part in parts)
    return Ticket(text, family, product, department, urgency, churn, refund, sentiment,
                  order_number, repeated)


def brief_ticket(rng: random.Random, family: str) -> Ticket:
    """A two- or three-sentence ticket: the issue, its urgency and at most one of a refund
    request, a churn threat or a tone. Few tokens, so each sentence's effect on an answer is
    easy to find: the first stage of training reads these before full tickets."""
    department = rng.choice(DEPARTMENTS)
    urgency = rng.randrange(3 if department == "sales" else 4)
    product = rng.choice(PRODUCTS[family])
    extra = rng.choice(("none", "refund", "churn", "tone"))
    sentiment = ("negative" if extra == "churn" else
                 rng.choice(SENTIMENTS) if extra == "tone" else "neutral")
    parts = [rng.choice(ISSUES[department][family]),
             rng.choice(URGENCY_PHRASES[URGENCY[urgency]][family])]
    if extra == "refund":
        parts.append(rng.choice(REFUND[family]))
    elif extra == "churn":
        parts.append(rng.choice(CHURN[family]))
    elif extra == "tone" and sentiment != "neutral":
        parts.append(rng.choice(TONE[sentiment][family]))
    rng.shuffle(parts)
    text = " ".join(_fill(rng, part, product, family) for part in parts)
    return Ticket(text, family, product, department, urgency, extra == "churn",
                  extra == "refund", sentiment, False, False)


def _choice_question(rng: random.Random, wording: str, labels: Tuple[str, ...], answer: str,
                     descriptions: Dict[str, str], subset: bool) -> Dict[str, Any]:
    """A choice question over `labels` (a random subset holding the answer when `subset`),
    with or without descriptions."""
    chosen = list(labels)
    if subset and len(labels) > 3:
        others = [label for label in labels if label != answer]
        chosen = sorted(rng.sample(others, rng.randint(2, len(others))) + [answer],
                        key=labels.index)
    if descriptions and rng.random() < 0.5:
        return {"type": "choice", "instructions": wording,
                "criteria": {label: descriptions[label] for label in chosen}}
    return {"type": "choice", "instructions": wording, "criteria": chosen}


def _alias(rng: random.Random, department: str, composed: bool) -> str:
    """Another name for a department: a fixed alias or, with `composed`, half the time a
    composed one."""
    if composed and rng.random() >= 0.5:
        return f"{rng.choice(DEPARTMENT_TOPICS[department])} {rng.choice(UNIT_WORDS)}"
    return rng.choice(DEPARTMENT_ALIASES[department])


def _relabelled(rng: random.Random, question: Dict[str, Any], answer: str,
                composed: bool = False) -> Tuple[Dict[str, Any], str]:
    """The department question with its options renamed (new names, new names with
    descriptions, or descriptions behind opaque names, in a shuffled order), and the answer's
    new name."""
    chosen = list(question["criteria"])
    rng.shuffle(chosen)
    style = rng.choice(("names", "described", "opaque"))
    if style == "opaque":
        names = dict(zip(chosen, rng.choice(OPAQUE_NAMES)))
    else:
        names = {label: _alias(rng, label, composed) for label in chosen}
    if style == "names":
        criteria: Any = [names[label] for label in chosen]
    else:
        criteria = {names[label]: rng.choice(DEPARTMENT_DESCRIPTIONS[label]) for label in chosen}
    return dict(question, criteria=criteria), names[answer]


def questions(rng: random.Random, item: Ticket, family: str, every: bool = False,
              relabel: bool = False) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """`(questions, expected)` for a ticket: the five main questions (or a sample of them) and one
    yes/no statement, worded from `family`; with `relabel` (training family only), the department
    question under other option names `RELABEL_RATE` of the time, and each of these
    `RENAME_RATE` of the time: urgency levels and sentiment labels under other names, the refund
    and churn questions in other words (`REWORDED`)."""
    descriptions = DEMO_QUESTIONS["department"]["criteria"] if family == "train" else {}
    wording = {key: rng.choice(WORDINGS[key][family]) for key in WORDINGS}
    department = _choice_question(rng, wording["department"], DEPARTMENTS, item.department,
                                  descriptions, subset=not every)
    department_answer = item.department
    if relabel and family == "train" and rng.random() < RELABEL_RATE:
        department, department_answer = _relabelled(rng, department, item.department)
    # The demo's urgency levels say what each means ("high: needed today"); training also
    # sees the bare level names, half the time.
    levels = URGENCY if family == "train" and rng.random() < 0.5 else URGENCY_LEVELS
    moods = dict(zip(SENTIMENTS, SENTIMENTS))
    if relabel and family == "train":
        for key, pool in REWORDED.items():
            if rng.random() < RENAME_RATE:
                wording[key] = rng.choice(pool)
        if rng.random() < RENAME_RATE:
            levels = rng.choice(URGENCY_ALIASES)
        if rng.random() < RENAME_RATE:
            moods = dict(zip(SENTIMENTS, rng.choice(SENTIMENT_ALIASES)))
    asked = {
        "department": (department, department_answer),
        "urgency": ({"type": "score", "instructions": wording["urgency"],
                     "criteria": list(levels)}, item.urgency),
        "churn_risk": ({"type": "noul", "instructions": wording["churn_risk"]}, item.churn),
        "refund": ({"type": "noul", "instructions": wording["refund"]}, item.refund),
        "sentiment": (_choice_question(rng, wording["sentiment"], tuple(moods.values()),
                                       moods[item.sentiment], {}, subset=False),
                      moods[item.sentiment]),
    }
    statement, fact = rng.choice(STATEMENTS[family])
    product = item.product if rng.random() < 0.5 else rng.choice(PRODUCTS[family])
    asked["statement"] = ({"type": "noul", "instructions": statement.format(product=product)},
                          item.fact(fact, product))
    keys = list(asked)
    if not every:
        keys = rng.sample(keys, 4)
    return ({key: asked[key][0] for key in keys}, {key: asked[key][1] for key in keys})


def rows(family: str, count: int, seed: int, every: bool = False,
         brief: bool = False, relabel: bool = False) -> List[Dict[str, Any]]:
    """`count` rows `{state, questions, expected, facts}` from `family` (the JSONL upstream
    `laya.train` reads; `facts` rides along for per-fact reports); `brief` rows hold
    `brief_ticket`s; `relabel` renames the training family's options (`questions`)."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    rng = random.Random(f"demo-tickets-{family}-{seed}{'-brief' if brief else ''}")
    write = brief_ticket if brief else ticket
    out = []
    for _ in range(count):
        item = write(rng, family)
        asked, expected = questions(rng, item, family, every, relabel)
        out.append({"state": item.text, "questions": asked, "expected": expected,
                    "facts": {"department": item.department, "urgency": item.urgency,
                              "churn": item.churn, "refund": item.refund,
                              "sentiment": item.sentiment}})
    return out


def refresh_rows(count: int, seed: int, stream: str) -> List[Dict[str, Any]]:
    """`count` training-family rows for the refresh (`scripts/train_demo.py`): the department
    question always under other option names, composed ones among them (`_alias`), the refund
    and churn questions always in other words (`REWORDED`), and the urgency question as the
    main training asks it. `stream` names a draw of its own, so that several such sets, and the
    training rows of the same seed, hold different tickets."""
    rng = random.Random(f"demo-tickets-train-{seed}-departments-{stream}")
    descriptions = DEMO_QUESTIONS["department"]["criteria"]
    out = []
    for _ in range(count):
        item = ticket(rng, "train")
        question = _choice_question(rng, rng.choice(WORDINGS["department"]["train"]),
                                    DEPARTMENTS, item.department, descriptions, subset=True)
        question, answer = _relabelled(rng, question, item.department, composed=True)
        asked, expected = {"department": question}, {"department": answer}
        for key, fact in (("refund", item.refund), ("churn_risk", item.churn)):
            asked[key] = {"type": "noul", "instructions": rng.choice(REWORDED[key])}
            expected[key] = fact
        levels = URGENCY if rng.random() < 0.5 else URGENCY_LEVELS
        if rng.random() < RENAME_RATE:
            levels = rng.choice(URGENCY_ALIASES)
        asked["urgency"] = {"type": "score", "criteria": list(levels),
                            "instructions": rng.choice(WORDINGS["urgency"]["train"])}
        expected["urgency"] = item.urgency
        out.append({"state": item.text, "questions": asked, "expected": expected,
                    "facts": {"department": item.department}})
    return out
