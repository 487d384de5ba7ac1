"""Generated text for training the synthetic checkpoints' tokenizers: Laya's own prompt
fragments, English support sentences and short sentences in several other languages (data and
the sentence generators)."""
from __future__ import annotations

import random
from typing import List

# The prompt fragments laya itself renders (question prefixes, option templates), so the learnt
# vocabulary covers them the way a real tokenizer would.
LAYA_PHRASES = (
    "choice question: ", "score question: ", "noul question: ",
    " level 0: low", " level 1: mid", " level 2: high", " level 3: critical",
    " false: no, the statement does not hold", " true: yes, the statement holds",
    " billing", " tech", " sales", " other", " yes", " no",
)

EN_WORDS = {
    "who": ["I", "We", "My manager", "The customer", "Our team", "My colleague", "The client",
            "Somebody in finance", "The new user", "Everyone in the office"],
    "item": ["card", "invoice", "order", "account", "subscription", "laptop", "printer",
             "password", "refund", "package", "router", "license", "phone", "payment",
             "report", "dashboard", "server", "email", "contract", "ticket"],
    "problem": ["was charged twice", "did not arrive", "stopped working", "is locked",
                "shows an error", "was cancelled by mistake", "keeps crashing",
                "cannot be renewed", "is missing", "was sent to the wrong address",
                "is much slower than usual", "has the wrong price", "was billed again",
                "needs to be reset", "cannot connect to the network"],
    "when": ["yesterday", "this morning", "last week", "twice today", "since Monday",
             "after the update", "again", "for the third time", "an hour ago", "on Friday"],
    "feel": ["Please help.", "This is urgent.", "Can you fix it today?", "Thanks in advance.",
             "I need an answer quickly.", "It is not critical.", "Nothing else is broken.",
             "We are losing money.", "Could you check?", "Any update would be great."],
    "adj": ["low", "medium", "high", "critical", "minor", "severe", "normal", "simple"],
}

# Everyday words for free-form filler sentences, so the BPE vocabulary grows past the template
# words and sentences of realistic length appear.
COMMON_WORDS = (
    "about above account across action active actually address after again against agent ago "
    "agree ahead alarm almost alone already also always amount another answer anyone anything "
    "appear apply approve area around arrive article asked available average away back balance "
    "bank basic battery because become before begin behind believe below benefit better between "
    "beyond bill birthday block board body book both bottom branch break bring broken budget "
    "build business button buy cable call camera cancel capital careful carry case cash cause "
    "center chance change charge cheap check child choose city claim class clean clear client "
    "close cloud code cold colour come common company complete computer confirm connect contact "
    "continue control copy correct cost could country course cover create credit customer damage "
    "data date deal delay delete delivery depend describe design detail device different direct "
    "discount display document double down download early easy edge effect either else email "
    "empty enough enter error even evening event every exact example expect expensive explain "
    "extra fail fair family fast feature fee field figure file final find fine finish first fix "
    "flight follow form forward free friend front full future game general give global good "
    "great group guess half hand happen hard head hear heavy help here history hold home hope "
    "hotel hour house however hundred idea image important include increase inside install "
    "instead issue item join just keep kind know large last late later learn leave legal less "
    "letter level light limit line list little local login long look lose lost machine mail "
    "main make manage many market match maybe mean measure meeting member message method middle "
    "might minute mobile model money month more morning most move much music must name near "
    "need network never next night note nothing notice number offer office often online only "
    "open option other outside over owner page paper part party pass past pay people period "
    "person picture place plan please point policy power price print private problem process "
    "product profile program project provide public purchase quality question quick quite rate "
    "reach read ready real reason receive record reduce region remember remove repair repeat "
    "reply request require result return review right room rule safe same save schedule screen "
    "search season second secure send service session setting share shipping short should show "
    "sign simple since single size small software some soon sorry sound source space special "
    "speed staff start status still stock stop store support sure system table take team tell "
    "term test thank thing think though through time today together tomorrow total touch track "
    "transfer travel true trust turn under unit until update upgrade usage user value version "
    "very video visit wait want warning watch water website week welcome while window without "
    "work world wrong year yesterday young zone"
).split()

EN_TEMPLATES = (
    "{who} said the {item} {problem} {when}. {feel}",
    "My {item} {problem}. {feel}",
    "The {item} {problem} {when}, and the {item2} {problem2}.",
    "Severity looks {adj}: the {item} {problem}.",
    "Is this urgent? The {item} {problem} {when}.",
    "{who} asked whether the {item} {problem}. {feel}",
    "Department: billing or tech? The {item} {problem}.",
    "Hello, my {item} {problem} {when}. Order number {num}. {feel}",
)

ML_SENTENCES = {
    "de": {
        "item": ["Karte", "Rechnung", "Bestellung", "Konto", "Lieferung", "Drucker", "Passwort",
                 "Zahlung", "Vertrag", "Laptop"],
        "problem": ["wurde zweimal belastet", "ist nicht angekommen", "funktioniert nicht mehr",
                    "ist gesperrt", "zeigt einen Fehler", "wurde falsch berechnet"],
        "when": ["gestern", "heute Morgen", "letzte Woche", "seit Montag", "schon wieder"],
        "feel": ["Bitte helfen Sie mir.", "Das ist dringend.", "Vielen Dank.",
                 "Können Sie das heute prüfen?", "Es ist nicht kritisch."],
        "templates": ("Meine {item} {problem}, {when}. {feel}",
                      "Die {item} {problem}. {feel}",
                      "Hallo, die {item} {problem} {when}. Nummer {num}."),
    },
    "fr": {
        "item": ["carte", "facture", "commande", "compte", "livraison", "imprimante",
                 "mot de passe", "paiement", "abonnement", "ordinateur"],
        "problem": ["a été débitée deux fois", "n'est pas arrivée", "ne fonctionne plus",
                    "est bloquée", "affiche une erreur", "a été annulée par erreur"],
        "when": ["hier", "ce matin", "la semaine dernière", "depuis lundi", "encore une fois"],
        "feel": ["Merci de m'aider.", "C'est urgent.", "Merci d'avance.",
                 "Pouvez-vous vérifier aujourd'hui ?", "Ce n'est pas grave."],
        "templates": ("Ma {item} {problem} {when}. {feel}",
                      "Bonjour, la {item} {problem}. {feel}",
                      "La {item} {problem} {when}, numéro {num}."),
    },
    "es": {
        "item": ["tarjeta", "factura", "pedido", "cuenta", "entrega", "impresora",
                 "contraseña", "pago", "suscripción", "portátil"],
        "problem": ["fue cobrada dos veces", "no ha llegado", "dejó de funcionar",
                    "está bloqueada", "muestra un error", "fue cancelada por error"],
        "when": ["ayer", "esta mañana", "la semana pasada", "desde el lunes", "otra vez"],
        "feel": ["Por favor, ayúdenme.", "Es urgente.", "Gracias de antemano.",
                 "¿Pueden revisarlo hoy?", "No es crítico."],
        "templates": ("Mi {item} {problem} {when}. {feel}",
                      "Hola, la {item} {problem}. {feel}",
                      "La {item} {problem} {when}, número {num}."),
    },
    "ja": {
        "item": ["カード", "請求書", "注文", "アカウント", "荷物", "プリンター", "パスワード",
                 "支払い", "契約", "パソコン"],
        "problem": ["が二重に請求されました", "が届きません", "が動かなくなりました",
                    "がロックされています", "でエラーが出ます", "が間違ってキャンセルされました"],
        "when": ["昨日", "今朝", "先週", "月曜日から", "また"],
        "feel": ["助けてください。", "至急お願いします。", "よろしくお願いします。",
                 "今日中に確認できますか。", "急ぎではありません。"],
        "templates": ("{when}、{item}{problem}。{feel}",
                      "{item}{problem}。番号は{num}です。",
                      "こんにちは。{item}{problem}。{feel}"),
    },
}


def filler_sentence(rng: random.Random) -> str:
    words = [rng.choice(COMMON_WORDS) for _ in range(rng.randint(4, 14))]
    words[0] = words[0].capitalize()
    return " ".join(words) + rng.choice((".", ".", "?", "!"))


def english_sentence(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return filler_sentence(rng)
    w = EN_WORDS
    return rng.choice(EN_TEMPLATES).format(
        who=rng.choice(w["who"]), item=rng.choice(w["item"]), item2=rng.choice(w["item"]),
        problem=rng.choice(w["problem"]), problem2=rng.choice(w["problem"]),
        when=rng.choice(w["when"]), feel=rng.choice(w["feel"]), adj=rng.choice(w["adj"]),
        num=rng.randint(1000, 99999))


def foreign_sentence(rng: random.Random, lang: str) -> str:
    d = ML_SENTENCES[lang]
    return rng.choice(d["templates"]).format(
        item=rng.choice(d["item"]), problem=rng.choice(d["problem"]), when=rng.choice(d["when"]),
        feel=rng.choice(d["feel"]), num=rng.randint(100, 9999))


def english_corpus(seed: int, n: int = 3000) -> List[str]:
    """Deterministic support-ticket style English text plus laya's own prompt fragments."""
    rng = random.Random("english-%d" % seed)
    lines = [english_sentence(rng) for _ in range(n)]
    return lines + list(LAYA_PHRASES) * 20


def multilingual_corpus(seed: int, n_per_lang: int = 1200) -> List[str]:
    """Deterministic English / German / French / Spanish / Japanese text."""
    rng = random.Random("multilingual-%d" % seed)
    lines = [english_sentence(rng) for _ in range(n_per_lang)]
    for lang in ("de", "fr", "es", "ja"):
        lines += [foreign_sentence(rng, lang) for _ in range(n_per_lang)]
    rng.shuffle(lines)
    return lines + list(LAYA_PHRASES) * 20
