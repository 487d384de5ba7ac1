"""The word and script tables language detection reads (laya_edge.lang, laya_edge.script_detect):
Unicode ranges of the named scripts and of recently added letters, function words per language,
and the letters ordinary English does not use. Data only; docs/design/routing.md says how they
are used.
"""
from __future__ import annotations

from typing import Dict, FrozenSet, Tuple

# Named non-Latin scripts and their code point ranges (hex, inclusive). No two ranges overlap.
SCRIPT_TABLE: Tuple[Tuple[str, str], ...] = (
    ("greek", "0370-03FF 1F00-1FFF"),
    ("cyrillic", "0400-052F 2DE0-2DFF A640-A69F"),
    ("armenian", "0530-058F"),
    ("hebrew", "0590-05FF"),
    ("arabic", "0600-06FF 0750-077F 08A0-08FF FB50-FDFF FE70-FEFF"),
    ("devanagari", "0900-097F A8E0-A8FF"),
    ("bengali", "0980-09FF"),
    ("gurmukhi", "0A00-0A7F"),
    ("gujarati", "0A80-0AFF"),
    ("oriya", "0B00-0B7F"),
    ("tamil", "0B80-0BFF"),
    ("telugu", "0C00-0C7F"),
    ("kannada", "0C80-0CFF"),
    ("malayalam", "0D00-0D7F"),
    ("sinhala", "0D80-0DFF"),
    ("thai", "0E00-0E7F"),
    ("lao", "0E80-0EFF"),
    ("tibetan", "0F00-0FFF"),
    ("myanmar", "1000-109F"),
    ("georgian", "10A0-10FF"),
    ("ethiopic", "1200-137F"),
    ("khmer", "1780-17FF"),
    ("hangul", "1100-11FF 3130-318F AC00-D7AF"),
    ("kana", "3040-309F 30A0-30FF 31F0-31FF"),
    ("han", "3400-4DBF 4E00-9FFF F900-FAFF"),
)

# Letters (general category L*) of Unicode 16.0 that are unassigned in Unicode 13.0, the database
# of the oldest supported interpreter (Python 3.10): everything Unicode 14.0-16.0 added as a letter,
# CJK extensions H and I included. Derived from the Python 3.10-3.13 databases plus a newer
# property table; ranges of hex code points. A character is looked up here only when the running
# interpreter reports it unassigned (``Cn``); an assigned one is decided by ``str.isalpha`` alone.
LATE_LETTERS = (
    "870-887 889-88E 8B5 8C8-8C9 C5D CDD 170D 171F 1B4C 1C89-1C8A 2C2F 2C5F 9FFD-9FFF "
    "A7C0-A7C1 A7CB-A7CD A7D0-A7D1 A7D3 A7D5-A7DC A7F2-A7F4 10570-1057A 1057C-1058A "
    "1058C-10592 10594-10595 10597-105A1 105A3-105B1 105B3-105B9 105BB-105BC 105C0-105F3 "
    "10780-10785 10787-107B0 107B2-107BA 10D4A-10D65 10D6F-10D85 10EC2-10EC4 10F70-10F81 "
    "11071-11072 11075 1123F-11240 11380-11389 1138B 1138E 11390-113B5 113B7 113D1 113D3 "
    "11740-11746 11AB0-11ABF 11BC0-11BE0 11F02 11F04-11F10 11F12-11F33 12F90-12FF0 1342F "
    "13441-13446 13460-143FA 16100-1611D 16A70-16ABE 16D40-16D6C 18CFF 1AFF0-1AFF3 "
    "1AFF5-1AFFB 1AFFD-1AFFE 1B11F-1B122 1B132 1B155 1DF00-1DF1E 1DF25-1DF2A 1E030-1E06D "
    "1E290-1E2AD 1E4D0-1E4EB 1E5D0-1E5ED 1E5F0 1E7E0-1E7E6 1E7E8-1E7EB 1E7ED-1E7EE "
    "1E7F0-1E7FE 2A6DE-2A6DF 2B735-2B739 2EBF0-2EE5D 31350-323AF "
)



def words_of(text: str) -> FrozenSet[str]:
    return frozenset(text.split())


# Order matters: it breaks ties between languages.
STOPWORDS: Dict[str, FrozenSet[str]] = {
    "en": words_of(
        "after already always and any are aren as at be because been before being between both "
        "but can could couldn didn didnt does doesn doesnt doing done dont down during each ever "
        "every few for from has hasn have haven havent here him his how i if in into is isn isnt "
        "it ive many might much must never nor not of on only onto our please shall she should "
        "some than that thats the their them then there these they this those through to too "
        "until very was wasn wasnt we were weren what whats when where which while who whom why "
        "will with within without won wont would wouldn yet you your youre yours "
    ),
    "fr": words_of(
        "alors au aux avec bien bonjour ce ces cette comment dans des deux dois doit donc du elle "
        "elles est et fait fois il ils je jour jours la le les ma mais merci mes mois mon nous "
        "ont ou pas peut peux plus pour pourquoi quand que qui sa ses sont sur ta tes ton tous "
        "tout toute trois très tu une veut veux vous être "
    ),
    "de": words_of(
        "aber auch auf aus bei bitte das dem den der dich die diese diesen dieser dieses dir ein "
        "eine einem einen einer für gibt habe haben heute ich im in ist jetzt kann kannst mein "
        "meine meinem meinen meiner mich mir mit nach nicht noch oder sich sind und uns von wann "
        "was welche werden wie wir wird wo wurde zu zum zur "
    ),
    "es": words_of(
        "al algo aquí aunque como con cuando del donde dos el entre es esa ese eso esta este esto "
        "está fue fueron gracias han hay hemos hoy la las le les lo los mi muy más nada necesito "
        "ni nos para pero por porque puede pueden que quiero se ser sobre son su sus también "
        "tengo tiene tienen todo tres tu un una y ya "
    ),
    "pt": words_of(
        "agora ainda alguem alguém ali antes ao aos aqui as até boa cadê com como consigo da das "
        "depois deu do dois dos e em entao então era esta estamos estava este estou está eu ficou "
        "fiz foi gostaria hoje isso isto ja já mais mas meu meus minha minhas muito na nada nao "
        "nas nenhum nenhuma ninguem ninguém noite nos nossa nosso não o obrigada obrigado olá "
        "onde ontem os para pela pelo pode podem por porque pra preciso quando que quero sao se "
        "ser seu sou sua são tambem também tarde tem tenho três tudo tá um uma vc vcs voce voces "
        "você vocês é "
    ),
    "it": words_of(
        "abbiamo adesso agli alla alle anche ancora avete che ci ciao col come con da dagli dal "
        "dalla dallo degli dei del della delle dello deve devo devono di dove e ed era fra già "
        "gli grazie ha hai hanno ho ieri il la le lo mai mi mia mio molto ne negli nel nell "
        "nella non o oggi per perche più poco quando questa questo scusa sempre si sono stata "
        "stato su sua sul sulla sulle tra tuo un una uno voglio vorrei è "
    ),
    "nl": words_of(
        "aan dat deze door een het is maar met naar niet ook op te van voor worden wordt zijn "
    ),
    "sv": words_of(
        "appen aterbetala aterbetalning att behover behöver blivit debiterade dessa detta "
        "faktura fel från får ganger gång gånger gör göra hittar hjalp hjalpa hjälp hjälpa här "
        "installningarna installningen inställningarna inställningen inte jag kommer kraschar "
        "kvittot losenord lösenord mig min mitt måste nar när nästa och också om oppnar paket ska "
        "skicka skulle sparningen spårningen säger till tva två upp uppdaterats utan vi vill är "
        "återbetala återbetalning öppnar "
    ),
    "ro": words_of(
        "aceasta această acest acesta acum ale care dar din după este foarte fost fără lui mi nu "
        "pentru până sunt să trebuie vreau vă în și ți "
    ),
    "bn": words_of(
        "abar ajke akhon amader amake amar ami amra apnake apnar apnara apni ar asbe bhai bhalo "
        "bolte bolun chai chaina dhonnobad dilam dite diye diyechi dorkar duibar ei eita ekbar "
        "ekhon ekhono ekta ferot geche gese hobe hocche hoise hoye hoyeche hoyni jabe jodi jonno "
        "kalke keno keu kharap khub ki kibhabe kichu kintu kivabe kobe kokhon korbo korchi kore "
        "koreche korechi koren korlam korsi korte korun kothay koto lagbe moddhe nai niye oi oita "
        "onek ota pabo paini parben parbo parchi parchina peyechi sathe shathe shob shomossa "
        "somossa tader tahole taka theke tomake tomar tomra tumi valo "
    ),
    "az": words_of(
        "amma ancaq artiq artıq bir biz bu cox daha deyil də eger görə həm hər ile ilə isə kimi "
        "lakin mən nə olan olmasa olub onlar siz sonra sən ucun var ve və yalniz yalnız yox "
        "yoxdur çox üçün əgər "
    ),
}

# Swedish support words specific enough to name a two- or three-word fragment.
SHORT_SWEDISH = words_of(
    "abonnemanget aterbetalning atkomst behover behöver betalningen fakturan felmeddelande glomt "
    "glömt inloggningen installningen inställningen kvitto kvittot losenord lösenord sparningen "
    "spårningen återbetalning åtkomst "
)

# Common Danish/Norwegian/Swedish words: never evidence for Swedish on their own.
NORDIC_OVERLAP = words_of("hej ja nej jo tack mig min om kommer får skulle vi")


# English words that a non-English list also holds: repeats count once as foreign evidence.
COLLISIONS = frozenset({"come", "son", "do", "care", "todo", "im", "per", "plus"})
SWEDISH_OPENERS = frozenset({"kan", "jag", "vi"})

# Letters ordinary English does not use (lower-case).
NON_EN_LETTERS = frozenset(
    "àâäãáåçéèêëíìîïñóòôöõøúùûüýÿßæœ"  # Western European
    "ăâîșțşţ"  # Romanian
    "ąćęłńśźż"  # Polish
    "čďěňřšťůž"  # Czech and Slovak
    "őű"  # Hungarian
    "ğı"  # Turkish
    "āēģīķļņūž"  # Baltic
    "đ"  # Croatian, Vietnamese
    "ə"  # Azerbaijani
)
