#!/usr/bin/env python3
"""Cost of `Router.route()` -- laya_edge's Router next to upstream `laya.Router`, same run.

Routing is pure Python (script detection, the Latin function-word heuristic, JSON flattening) and
loads nothing, so it should cost microseconds. This times `route(state, questions)` per call over
a realistic mix of support tickets: a dozen languages in Latin, Cyrillic, Greek, Arabic, Hebrew,
Devanagari, Bengali, Han, kana, Hangul and Thai script; short one-liners, long multi-paragraph
tickets with a stack trace, URLs and e-mail addresses; dict/list (JSON) states with nested
fields and conversation turns. Both Routers are built with `default="english"` and no hooks.

Each round visits every state once per implementation, in a shuffled (seeded) order, the two
implementations interleaved per state so drift hits both alike; garbage collection is off while
timing. Prints a markdown table (p50 / p90 / mean µs per call, per category and overall, and the
upstream/laya_edge ratio) and a JSON record. A benchmark, not a test: numbers depend on the host.

Examples::

    python scripts/bench_route.py
    python scripts/bench_route.py --rounds 200 --json /tmp/route_bench.json
"""
from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

QUESTIONS = {
    "urgency": {"type": "choice", "criteria": ["low", "medium", "high"]},
    "category": {"type": "choice", "criteria": ["billing", "access", "delivery", "other"]},
    "needs_human": {"type": "noul", "instructions": "Does this need a human agent?"},
}

SHORT = [
    ("en", "Refund please, I was charged twice"),
    ("en", "Can't log in since the update"),
    ("de", "Passwort vergessen, bitte zurücksetzen"),
    ("fr", "Je n'arrive pas à me connecter depuis hier"),
    ("es", "No puedo acceder a mi cuenta desde ayer"),
    ("pt", "vc pode cancelar minha assinatura pra mim?"),
    ("it", "Non riesco ad accedere al mio account"),
    ("nl", "Ik kan niet inloggen op mijn account"),
    ("sv", "Jag har glömt mitt lösenord"),
    ("ru", "Не могу войти в аккаунт"),
    ("ar", "لا أستطيع تسجيل الدخول إلى حسابي"),
    ("zh", "我的订单还没到"),
    ("ja", "パスワードを忘れました"),
    ("ko", "비밀번호를 잊어버렸어요"),
    ("hi", "मेरा ऑर्डर अभी तक नहीं आया"),
    ("th", "ฉันเข้าสู่ระบบไม่ได้"),
    ("en", "OK"),
    ("none", "#48213 / 2024-05-01 12:30"),
]

MEDIUM = [
    ("en", "Hi team, my invoice for March shows two charges of $49.99 on the same day. "
           "Could you refund the duplicate and confirm by email to jane.doe@example.com? Thanks."),
    ("de", "Guten Tag, ich habe meine Bestellung vor zwei Wochen aufgegeben und sie ist immer "
           "noch nicht angekommen. Können Sie bitte nachsehen, wo das Paket ist?"),
    ("fr", "Bonjour, depuis la mise à jour de l'application je ne reçois plus les notifications "
           "et je dois redémarrer le téléphone à chaque fois. Pouvez-vous m'aider ?"),
    ("es", "Hola, compré una suscripción anual pero me están cobrando cada mes. Por favor, "
           "revisen mi cuenta y devuélvanme el dinero cobrado de más."),
    ("pt", "Olá, não consigo redefinir minha senha porque o e-mail de recuperação nunca chega. "
           "Já verifiquei a caixa de spam e não tem nada lá."),
    ("ro", "Bună ziua, aș dori să anulez abonamentul și să primesc o factură pentru ultima lună."),
    ("az", "Salam, sifarişim hələ də gəlməyib və heç bir məlumat almamışam, "
           "zəhmət olmasa kömək edin."),
    ("uk", "Добрий день! Я оплатив замовлення, але статус досі «очікує оплати». Що робити?"),
    ("el", "Καλησπέρα, η παραγγελία μου δεν έχει φτάσει ακόμα και δεν έχω λάβει κανένα μήνυμα."),
    ("he", "שלום, חויבתי פעמיים על אותה הזמנה ואשמח לקבל החזר כספי בהקדם."),
    ("bn", "আমার অর্ডারটি এখনও পৌঁছায়নি, অনুগ্রহ করে দেখুন কী সমস্যা হয়েছে।"),
    ("zh", "你好，我上周买的耳机左边没有声音，已经试过重新配对了，还是不行，请问可以换货吗？"),
    ("ja", "先週注文した商品がまだ届いていません。追跡番号も表示されないので確認をお願いします。"),
    ("ko", "안녕하세요, 지난주에 주문한 상품이 아직 도착하지 않았습니다. 확인 부탁드립니다."),
    ("mixed", "My name is 王小明 and my order #A-1021 is late; please check "
              "https://shop.example.com/orders/1021"),
]

TRACEBACK = "\n".join([
    "Traceback (most recent call last):",
    '  File "/srv/app/billing/charge.py", line 214, in create_charge',
    "    response = client.charges.create(amount=amount, currency=currency)",
    '  File "/usr/lib/python3.11/site-packages/payments/api.py", line 88, in create',
    "    raise PaymentError(f'card_declined: {code}')",
    "payments.errors.PaymentError: card_declined: insufficient_funds",
])

LONG = [
    ("en", "\n\n".join([
        "Hello support,",
        "Since Tuesday every checkout on our store fails for customers paying by card. The "
        "payment page spins for about thirty seconds and then shows a generic error. We have "
        "not changed anything on our side, and PayPal payments still work. Our logs show the "
        "trace below for every failed attempt.",
        TRACEBACK,
        "This is costing us orders every hour, so we would appreciate an urgent look. The store "
        "is at https://store.example.com and the account owner is ops@example.com. " * 3,
        "Best regards,\nThe operations team"])),
    ("pt", "\n".join([
        "Oi, tudo bem? Estou tentando finalizar a compra faz dois dias e sempre dá erro.",
        TRACEBACK,
        "Já tentei em outro navegador e no celular e continua igual, não sei mais o que fazer. "
        "Vocês podem verificar o que está acontecendo com a minha conta? Obrigado. " * 4])),
    ("de", " ".join(["Sehr geehrte Damen und Herren, leider funktioniert die Synchronisierung "
                     "zwischen der App und dem Webportal seit dem letzten Update nicht mehr, "
                     "sodass meine Einträge doppelt oder gar nicht erscheinen."] * 8)),
    ("ru", " ".join(["Здравствуйте! После обновления приложение перестало синхронизироваться с "
                     "сервером, и все мои заметки за последнюю неделю пропали."] * 10)),
    ("zh", "".join(["您好，自从上次更新以后，应用程序每次启动都会闪退，我已经尝试卸载重装，但问题依然存在。"] * 12)),
]

JSON_STATES = [
    ("en", {"subject": "Invoice discrepancy", "body": MEDIUM[0][1],
            "customer": {"id": 48213, "tier": "gold", "email": "jane.doe@example.com"},
            "tags": ["billing", "refund"], "priority": None}),
    ("de", {"subject": "Lieferung fehlt", "body": MEDIUM[1][1],
            "meta": {"channel": "email", "locale": "de-DE", "attempts": 2}}),
    ("mixed", {"subject": "Checkout broken", "body": "Checkout fails for every card payment "
               "since Tuesday, see the trace in the attachment.",
               "notes": ["Kunde sagt, dass es seit dem Update nicht mehr funktioniert und er "
                         "sehr verärgert ist.", "Escalated by tier 1."]}),
    ("en", [{"role": "user", "content": "Hi, I can't log in to my account."},
            {"role": "assistant", "content": "Sorry to hear that! Have you tried resetting "
                                             "your password?"},
            {"role": "user", "content": "Yes, but the reset email never arrives."}]),
    ("es", [{"role": "user", "content": "Hola, no me llega el correo para cambiar la "
                                        "contraseña."},
            {"role": "assistant", "content": "¿Ha revisado la carpeta de correo no deseado?"},
            {"role": "user", "content": "Sí, ya lo revisé y no hay nada."}]),
    ("ja", {"件名": "返品について", "本文": "先週購入したシャツのサイズが合わないので返品したいです。",
            "order": {"id": "JP-20931", "items": 1}}),
    ("en", {"event": "agent_trace", "steps": [{"tool": "search", "output": "3 results"},
                                              {"tool": "email", "output": "sent to customer"}],
            "summary": "The agent refunded the duplicate charge and emailed the customer."}),
    ("none", {"id": 1021, "amount": 49.99, "paid": True, "items": [1, 2, 3]}),
]

CATEGORIES = {"short": SHORT, "medium": MEDIUM, "long": LONG, "json": JSON_STATES}


def routers() -> Dict[str, Callable[[Any], Any]]:
    import laya

    from laya_edge.router import Router

    ours, theirs = Router(default="english"), laya.Router(default="english")
    return {"laya_edge": lambda s: ours.route(s, QUESTIONS),
            "upstream": lambda s: theirs.route(s, QUESTIONS)}


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def stats(samples: Sequence[float]) -> Dict[str, float]:
    return {"p50_us": round(percentile(samples, 0.5), 2),
            "p90_us": round(percentile(samples, 0.9), 2),
            "mean_us": round(statistics.fmean(samples), 2), "calls": len(samples)}


def bench(rounds: int, warmup: int, seed: int) -> Dict[str, Any]:
    impls = routers()
    items: List[Tuple[str, str, Any]] = [(category, lang, state)
                                         for category, states in CATEGORIES.items()
                                         for lang, state in states]
    # the decisions must be the same before their cost is worth comparing
    disagreements = [(category, lang) for category, lang, state in items
                     if impls["laya_edge"](state)["model"] != impls["upstream"](state)["model"]]
    for _ in range(warmup):
        for _, _, state in items:
            for fn in impls.values():
                fn(state)
    samples: Dict[str, Dict[str, List[float]]] = {name: {c: [] for c in CATEGORIES}
                                                  for name in impls}
    rng = random.Random(seed)
    clock = time.perf_counter_ns
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(rounds):
            order = list(items)
            rng.shuffle(order)
            names = list(impls) if r % 2 == 0 else list(reversed(impls))
            for category, _, state in order:
                for name in names:
                    fn = impls[name]
                    start = clock()
                    fn(state)
                    samples[name][category].append((clock() - start) / 1000.0)
    finally:
        if gc_was_enabled:
            gc.enable()
    table: Dict[str, Dict[str, Dict[str, float]]] = {}
    for name, by_category in samples.items():
        table[name] = {c: stats(v) for c, v in by_category.items()}
        table[name]["all"] = stats([x for v in by_category.values() for x in v])
    ratios = {c: {k: round(table["upstream"][c][k] / table["laya_edge"][c][k], 2)
                  for k in ("p50_us", "p90_us", "mean_us")}
              for c in list(CATEGORIES) + ["all"]}
    return {"rounds": rounds, "states": {c: len(v) for c, v in CATEGORIES.items()},
            "decision_disagreements": disagreements, "results": table,
            "ratio_upstream_over_laya_edge": ratios,
            "host": {"python": platform.python_version(), "machine": platform.machine(),
                     "processor": platform.processor() or None}}


def markdown(record: Dict[str, Any]) -> str:
    results, ratios = record["results"], record["ratio_upstream_over_laya_edge"]
    lines = ["| states | n | laya_edge p50 µs | laya_edge p90 µs | upstream p50 µs | "
             "upstream p90 µs | upstream / laya_edge (p50) | (p90) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for category in list(CATEGORIES) + ["all"]:
        ours, theirs = results["laya_edge"][category], results["upstream"][category]
        n = record["states"].get(category, sum(record["states"].values()))
        lines.append(f"| {category} | {n} | {ours['p50_us']:.1f} | {ours['p90_us']:.1f} | "
                     f"{theirs['p50_us']:.1f} | {theirs['p90_us']:.1f} | "
                     f"{ratios[category]['p50_us']:.2f}× | {ratios[category]['p90_us']:.2f}× |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the record to this file")
    args = parser.parse_args(argv)
    record = bench(args.rounds, args.warmup, args.seed)
    print(markdown(record))
    print()
    print(json.dumps(record, indent=2, ensure_ascii=False))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(record, handle, indent=2, ensure_ascii=False)
    return 0 if not record["decision_disagreements"] else 1


if __name__ == "__main__":
    sys.exit(main())
