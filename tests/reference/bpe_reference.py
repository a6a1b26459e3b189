#!/usr/bin/python3
"""An independent GPT-2 BPE for checking holmes-node tokenize (tests/integration/tokenize.sh).

  bpe_reference.py train CORPUS MERGES OUT [JSON]   a byte-level BPE vocabulary trained on
                                             CORPUS, written as llm.c's tokenizer file (version
                                             2), and as transformers' vocab.json to JSON
  bpe_reference.py encode VOCAB FILE...      each FILE one document: prints JSON of the
                                             tokens llm.c's scripts would write (end-of-text,
                                             then the document's tokens)
  bpe_reference.py jsonl VOCAB FIELD FILE    the same for each line's FIELD of a JSON-lines file
  bpe_reference.py stress OUT SEED           a document of text hard to cut into pieces

The vocabulary is laid out as GPT-2's: the 256 bytes in GPT-2's order (bytes_to_unicode: the
printable ones first), then one token per merge in the order learned, then <|endoftext|>; a
token's id is its rank. Encoding is tiktoken's (its _educational.py and src/lib.rs): the text
cut by GPT-2's pattern with the `regex` module (python3-regex), a piece that is a token taken
whole, else the adjacent pair of the lowest rank merged first, the leftmost among equals.
"""
import collections
import json
import random
import struct
import sys

import regex

PATTERN = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def gpt2_byte_order():
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) +
          list(range(ord("®"), ord("ÿ") + 1)))
    return bs + [b for b in range(256) if b not in bs]


def bytes_to_unicode():
    """GPT-2's table (encoder.py): the character that stands for each byte in vocab.json."""
    bs = gpt2_byte_order()[:188]
    cs = list(bs)
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def train(corpus_path, merges, out_path, json_path=None):
    text = open(corpus_path, encoding="utf-8").read()
    words = collections.Counter(m.encode() for m in PATTERN.findall(text))
    seqs = {w: [bytes([b]) for b in w] for w in words}
    pairs = collections.Counter()
    where = collections.defaultdict(set)
    for w, s in seqs.items():
        for a, b in zip(s, s[1:]):
            pairs[(a, b)] += words[w]
            where[(a, b)].add(w)
    vocab = [bytes([b]) for b in gpt2_byte_order()]
    for _ in range(merges):
        if not pairs:
            break
        # the most frequent pair; ties broken by the pair's bytes (deterministic)
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        if pairs[best] < 2:
            break
        new = best[0] + best[1]
        vocab.append(new)
        for w in list(where[best]):
            s, n = seqs[w], words[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] -= n
                if pairs[(a, b)] <= 0:
                    del pairs[(a, b)]
                where[(a, b)].discard(w)
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    out.append(new)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
            for a, b in zip(out, out[1:]):
                pairs[(a, b)] += n
                where[(a, b)].add(w)
    vocab.append(b"<|endoftext|>")
    with open(out_path, "wb") as f:
        header = [20240328, 2, len(vocab), len(vocab) - 1] + [0] * 252
        f.write(struct.pack("<256I", *header))
        for t in vocab:
            f.write(bytes([len(t)]) + t)
    if json_path:
        table = bytes_to_unicode()
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump({("".join(table[b] for b in t) if t != b"<|endoftext|>" else t.decode()): i
                       for i, t in enumerate(vocab)}, f, ensure_ascii=False)
    print(f"{len(vocab)} tokens", file=sys.stderr)


def read_vocab(path):
    data = open(path, "rb").read()
    h = struct.unpack_from("<256I", data)
    n, eot = h[2], h[3]
    ranks, at = {}, 1024
    for i in range(n):
        ln = data[at]
        piece = data[at + 1:at + 1 + ln]
        at += 1 + ln
        if i != eot and piece not in ranks:
            ranks[piece] = i
    return ranks, eot


def bpe(piece, ranks):
    if piece in ranks:
        return [ranks[piece]]
    parts = [bytes([b]) for b in piece]
    while True:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            break
        i = best[1]
        parts[i:i + 2] = [parts[i] + parts[i + 1]]
    return [ranks[p] for p in parts]


def encode(text, ranks):
    out = []
    for m in PATTERN.findall(text):
        out.extend(bpe(m.encode("utf-8"), ranks))
    return out


def stress(out_path, seed):
    rnd = random.Random(seed)
    atoms = [
        "hello", "World", "don't", "it's", "I'm", "we'll", "they're", "you've", "he'd", "'S",
        "''", "'", "12345", "3.14", "1,000", "٣٤", "²", "Ⅻ", "½", "é", "e\u0301", "ñ", "ß",
        "Ελλάδα", "Москва", "東京", "日本語", "한국어", "עברית", "العربية", "हिन्दी", "ไทย",
        "😀", "👍🏽", "🇫🇷", "∑", "→", "€", "...", "!?", "<|endoftext|>", "<|", "|>", "#",
        "@user", "http://x.org/a?b=c", "C++", "a_b", "x=1;", "\u200b", "\ufeff", "ﬁ",
    ]
    spaces = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\n ", "\x0b", "\x0c",
              "\xa0", "\u2028", "\u3000", "\u2009", "\x85", "\x1c", "\x1f", ""]
    parts = []
    for _ in range(4000):
        parts.append(rnd.choice(atoms))
        parts.append(rnd.choice(spaces))
    with open(out_path, "w", encoding="utf-8", newline="") as f:
        f.write("".join(parts))


def main():
    cmd = sys.argv[1]
    if cmd == "train":
        train(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5] if len(sys.argv) > 5 else None)
    elif cmd == "encode":
        ranks, eot = read_vocab(sys.argv[2])
        toks = []
        for path in sys.argv[3:]:
            with open(path, encoding="utf-8", newline="") as f:
                toks += [eot] + encode(f.read(), ranks)
        print(json.dumps(toks))
    elif cmd == "jsonl":
        ranks, eot = read_vocab(sys.argv[2])
        toks = []
        with open(sys.argv[4], encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    toks += [eot] + encode(json.loads(line)[sys.argv[3]], ranks)
        print(json.dumps(toks))
    elif cmd == "stress":
        stress(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
