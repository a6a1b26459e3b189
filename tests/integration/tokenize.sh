# holmes-node tokenize against an independent encoder: tests/reference/bpe_reference.py trains a
# byte-level BPE vocabulary on the demo corpus (2,000 merges, GPT-2's byte order, written as
# llm.c's tokenizer file) and encodes with tiktoken's algorithm and the `regex` module
# (python3-regex); the shards holmes-node writes must hold exactly its tokens: English text, text
# made to be hard to cut (scripts, digits, marks, emoji, contractions, unusual whitespace), a text
# larger than the batches it is read in (on 1 and 3 threads), a line of 4.5 MiB, JSON lines,
# standard input. Then the shards train a
# model (holmes-node train reads them), `sample --prompt` encodes its text the same way, and bad
# input is refused naming the file, the line or the byte, with no shard left behind.
source "$(dirname "$0")/lib.bash"
tmp=$(mktemp -d /tmp/holmes-tokenize.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
if ! /usr/bin/python3 -c 'import regex' 2>/dev/null; then
    echo "SKIP tokenize: python3-regex is not installed for /usr/bin/python3 (make deps): no reference encoder"
    exit 0
fi
ref="/usr/bin/python3 $REPO/tests/reference/bpe_reference.py"
corpus=$REPO/examples/data/corpus.txt
mkdir -p "$tmp/hf"
$ref train "$corpus" 2000 "$tmp/vocab.bin" "$tmp/hf/vocab.json" 2>/dev/null
check "reference: a vocabulary of 256 bytes, 2,000 merges and end-of-text" \
    test "$(od -An -tu4 -j8 -N4 "$tmp/vocab.bin" | tr -d ' ')" = 2257
for s in 1 2 3; do $ref stress "$tmp/stress$s.txt" $s; done

# the tokens of shards PREFIX_val_* then PREFIX_train_*, as JSON
shard_tokens() {
    /usr/bin/python3 - "$1" <<'PY'
import glob, json, struct, sys
out = []
for f in sorted(glob.glob(sys.argv[1] + "_val_*.bin")) + sorted(glob.glob(sys.argv[1] + "_train_*.bin")):
    d = open(f, "rb").read()
    h = struct.unpack_from("<256i", d)
    assert h[0] == 20240520 and h[1] == 1 and len(d) == 1024 + 2 * h[2], f
    out += struct.unpack_from("<%dH" % h[2], d, 1024)
print(json.dumps(out))
PY
}
same() { [ "$(shard_tokens "$1")" = "$2" ]; }

out=$("$NODE" tokenize --tokenizer "$tmp/vocab.bin" --out "$tmp/a" --val-tokens 5000 \
    --shard-tokens 20000 "$corpus" "$tmp/stress1.txt" "$tmp/stress2.txt" "$tmp/stress3.txt" 2>&1)
want=$($ref encode "$tmp/vocab.bin" "$corpus" "$tmp/stress1.txt" "$tmp/stress2.txt" "$tmp/stress3.txt")
check "tokenize: 4 documents written (val 5,000 tokens, then shards of 20,000): $out" \
    grep -q "4 documents.*a_val_000000.bin, .*a_train_000001.bin to _0000" <<<"$out"
check "tokenize: the shards hold the reference's tokens exactly ($(jq length <<<"$want") tokens)" same "$tmp/a" "$want"
check "tokenize: the val shard holds 5,000 tokens, no temporary left" bash -c \
    "[ \$(od -An -tu4 -j8 -N4 '$tmp/a_val_000000.bin' | tr -d ' ') = 5000 ] && ! ls '$tmp' | grep -q tmp"

# transformers' vocab.json of the same vocabulary (bytes_to_unicode's characters), named or as
# a model directory: the same shards
"$NODE" tokenize --tokenizer "$tmp/hf/vocab.json" --out "$tmp/vj" "$corpus" "$tmp/stress1.txt" >/dev/null 2>&1
"$NODE" tokenize --tokenizer "$tmp/hf" --out "$tmp/vd" "$corpus" "$tmp/stress1.txt" >/dev/null 2>&1
"$NODE" tokenize --tokenizer "$tmp/vocab.bin" --out "$tmp/vb" "$corpus" "$tmp/stress1.txt" >/dev/null 2>&1
check "tokenize: transformers' vocab.json, and its directory, give llm.c's tokenizer's shards" \
    bash -c "cmp -s '$tmp/vj_train_000000.bin' '$tmp/vb_train_000000.bin' && cmp -s '$tmp/vd_train_000000.bin' '$tmp/vb_train_000000.bin'"

# a text of 5.3 MiB, read in 1 MiB segments cut where no piece is cut: on 1 thread in two
# batches of 4, on 3 threads in one of 12; and 4.5 MiB on one line (no place to cut: the reader
# looks further, then grows its buffer)
for i in $(seq 1 22); do cat "$corpus" "$tmp/stress$((i % 3 + 1)).txt"; done >"$tmp/big.txt"
"$NODE" tokenize --tokenizer "$tmp/vocab.bin" --out "$tmp/big" --jobs 1 "$tmp/big.txt" >/dev/null 2>&1
check "tokenize: a 5.3 MiB text in segments, 1 thread: the tokens of the whole" \
    same "$tmp/big" "$($ref encode "$tmp/vocab.bin" "$tmp/big.txt")"
"$NODE" tokenize --tokenizer "$tmp/vocab.bin" --out "$tmp/big3" --jobs 3 --shard-tokens 1000000 "$tmp/big.txt" >/dev/null 2>&1
check "tokenize: the same on 3 threads (shards of 10^6 tokens): the same tokens" \
    test "$(cat "$tmp"/big_train_*.bin | tail -c +1025 | md5sum)" = "$(for f in "$tmp"/big3_train_*.bin; do tail -c +1025 "$f"; done | md5sum)"
tr '\n' ' ' <"$tmp/big.txt" | head -c 4700000 >"$tmp/line.txt"
"$NODE" tokenize --tokenizer "$tmp/vocab.bin" --out "$tmp/line" --jobs 1 "$tmp/line.txt" >/dev/null 2>&1
check "tokenize: 4.5 MiB without a newline: the tokens of the whole" \
    same "$tmp/line" "$($ref encode "$tmp/vocab.bin" "$tmp/line.txt")"
"$NODE" tokenize --tokenizer "$tmp/vocab.bin" --out "$tmp/in" - <"$tmp/stress2.txt" >/dev/null 2>&1
check "tokenize: standard input (-) as a document" same "$tmp/in" "$($ref encode "$tmp/vocab.bin" "$tmp/stress2.txt")"

/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
d = sys.argv[1]
docs = [open(f"{d}/stress{i}.txt", encoding="utf-8", newline="").read()[:3000] for i in (1, 2, 3)]
with open(f"{d}/docs.jsonl", "w") as f:
    for i, t in enumerate(docs + ["Café \u00e9t\u00e9, naïve résumé.", "line\nbreaks\n\n and \"quotes\""]):
        f.write(json.dumps({"id": i, "body": t}) + "\n")
        if i == 1:
            f.write("\n")  # a blank line: skipped
PY
out=$("$NODE" tokenize --tokenizer "$tmp/vocab.bin" --out "$tmp/j" --jsonl --field body "$tmp/docs.jsonl" 2>&1)
check "tokenize --jsonl: 5 documents of the field 'body', the blank line skipped" grep -q "5 documents" <<<"$out"
check "tokenize --jsonl: the reference's tokens" same "$tmp/j" "$($ref jsonl "$tmp/vocab.bin" body "$tmp/docs.jsonl")"

# the shards are training data: a model of the vocabulary trains on them, and samples text
# from a prompt encoded with the same BPE
(cd "$tmp" && OMP_NUM_THREADS=2 timeout 300 "$NODE" train --data "$tmp/a_train_*.bin" \
    --eval-data "$tmp/a_val_*.bin" --eval-batches 2 --layers 2 --channels 32 --heads 2 \
    --vocab 2257 --seq 64 --batch 4 --micro-batches 1 --steps 30 --lr 3e-3 \
    --checkpoint-dir "$tmp/ckpt" --metrics-out "$tmp/m.jsonl" >"$tmp/train.out" 2>&1)
first=$(jq -r 'select(.loss) | .loss' "$tmp/m.jsonl" 2>/dev/null | head -1)
last=$(jq -r 'select(.loss) | .loss' "$tmp/m.jsonl" 2>/dev/null | tail -1)
check "train on the shards: 30 steps, the loss falls ($first -> $last)" \
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(a > 6 && b < a - 1) }'
out=$("$NODE" sample --checkpoint-dir "$tmp/ckpt" --tokenizer "$tmp/vocab.bin" \
    --prompt "The king said" --tokens 12 --seed 5 2>/dev/null)
check "sample --prompt with the tokenizer: BPE-encoded, continued (${#out} characters)" \
    test "${out:0:13}" = "The king said" -a "${#out}" -gt 13
# the prompt's tokens are the encoder's: --prompt-tokens of the reference's ids gives the same text
ids=$(/usr/bin/python3 -c "
import sys; sys.path.insert(0, '$REPO/tests/reference'); import bpe_reference as b
r, _ = b.read_vocab('$tmp/vocab.bin'); print(','.join(map(str, b.encode('The king said', r))))")
out2=$("$NODE" sample --checkpoint-dir "$tmp/ckpt" --tokenizer "$tmp/vocab.bin" \
    --prompt-tokens "$ids" --tokens 12 --seed 5 2>/dev/null)
check "sample: --prompt TEXT and --prompt-tokens of the reference's ids ($ids) give the same text" \
    test -n "$out" -a "$out" = "$out2"
out3=$("$NODE" sample --checkpoint-dir "$tmp/ckpt" --tokenizer "$tmp/hf" \
    --prompt "The king said" --tokens 12 --seed 5 2>/dev/null)
check "sample --tokenizer DIR (vocab.json): the same text" test -n "$out3" -a "$out3" = "$out"

# refusals: each names what is wrong; no shard of the failed run is left
# exit_and_says RC WANT PATTERN TEXT: rc is WANT and TEXT holds PATTERN
exit_and_says() { [ "$1" = "$2" ] && grep -q -- "$3" <<<"$4"; }
printf 'good text\n\xff\xfe bad\n' >"$tmp/bad.txt"
out=$("$NODE" tokenize --tokenizer "$tmp/vocab.bin" --out "$tmp/b" --shard-tokens 1000 "$corpus" "$tmp/bad.txt" 2>&1); rc=$?
check "tokenize: text that is not UTF-8 refused naming the file and byte 10, exit 1 ($out)" \
    exit_and_says $rc 1 "bad.txt: not UTF-8 at byte 10" "$out"
check "tokenize: the failed run's shards removed (the corpus's were written first)" \
    bash -c "! ls '$tmp' | grep -q '^b_'"
out=$("$NODE" tokenize --tokenizer "$tmp/vocab.bin" --out "$tmp/a" "$corpus" 2>&1); rc=$?
check "tokenize: an earlier run's shards refused, naming one and --replace" \
    exit_and_says $rc 1 "a_.*is there already.*--replace" "$out"
# --replace that fails midway (the corpus's shards written, then text that is not UTF-8): the
# earlier set is left as it was, byte for byte, and nothing of the failed run (until 2026-11-29
# the old shards were removed first and lost)
before=$(cd "$tmp" && sha256sum a_*)
out=$("$NODE" tokenize --tokenizer "$tmp/vocab.bin" --out "$tmp/a" --shard-tokens 1000 --replace \
    "$corpus" "$tmp/bad.txt" 2>&1); rc=$?
check "tokenize --replace failing midway: refused naming the file, exit 1" \
    exit_and_says $rc 1 "bad.txt: not UTF-8" "$out"
check "tokenize --replace failing midway: the earlier shards as they were, no .tmp left" \
    test "$(cd "$tmp" && sha256sum a_*)" = "$before"
"$NODE" tokenize --tokenizer "$tmp/vocab.bin" --out "$tmp/a" --replace "$corpus" >/dev/null 2>&1
check "tokenize --replace: the 8 earlier shards replaced by the new one" test "$(ls "$tmp" | grep -c '^a_')" = 1
printf '{"text": "ok"}\n{"text": 3}\n' >"$tmp/num.jsonl"
out=$("$NODE" tokenize --tokenizer "$tmp/vocab.bin" --out "$tmp/n" --jsonl "$tmp/num.jsonl" 2>&1)
check "tokenize --jsonl: a field that is not a string refused, naming file, line and field ($out)" \
    grep -q 'num.jsonl:2: the field "text" is not a string' <<<"$out"
printf '{"text": "ok"}\nnot json\n' >"$tmp/nj.jsonl"
out=$("$NODE" tokenize --tokenizer "$tmp/vocab.bin" --out "$tmp/n" --jsonl "$tmp/nj.jsonl" 2>&1)
check "tokenize --jsonl: a line that is not JSON refused, naming it ($out)" grep -q 'nj.jsonl:2: not JSON' <<<"$out"
# a line is one object: characters after it, or a NUL inside (which would cut the document
# short unsaid), are refused (until 2026-11-29 both were taken)
printf '{"text": "ok"}\n{"text": "more"} {"text": "hidden"}\n' >"$tmp/tail.jsonl"
out=$("$NODE" tokenize --tokenizer "$tmp/vocab.bin" --out "$tmp/n" --jsonl "$tmp/tail.jsonl" 2>&1); rc=$?
check "tokenize --jsonl: characters after the object refused, naming file and line ($out)" \
    exit_and_says $rc 1 'tail.jsonl:2: characters after the JSON object' "$out"
printf '{"text": "ok"}\n{"text": "cut\\u0000here"}\n' >"$tmp/nul.jsonl"
out=$("$NODE" tokenize --tokenizer "$tmp/vocab.bin" --out "$tmp/n" --jsonl "$tmp/nul.jsonl" 2>&1); rc=$?
check "tokenize --jsonl: a \\u0000 inside the text refused, naming file and line ($out)" \
    exit_and_says $rc 1 'nul.jsonl:2: a NUL character' "$out"
printf '{"text": "ok"}   \r\n' >"$tmp/crlf.jsonl"
out=$("$NODE" tokenize --tokenizer "$tmp/vocab.bin" --out "$tmp/crlf" --jsonl "$tmp/crlf.jsonl" 2>&1); rc=$?
check "tokenize --jsonl: blanks and CR after the object are fine ($out)" test $rc = 0
out=$("$NODE" tokenize --tokenizer "$corpus" --out "$tmp/n" "$corpus" 2>&1); rc=$?
check "tokenize: a tokenizer that is not one refused, naming the flag and file ($out)" \
    exit_and_says $rc 1 "--tokenizer: tokenizer $corpus: magic" "$out"
out=$("$NODE" tokenize --out "$tmp/n" "$corpus" 2>&1); rc=$?
check "tokenize: no --tokenizer is a usage error (exit 2)" exit_and_says $rc 2 "--tokenizer is required" "$out"
out=$(printf '\n\n' | "$NODE" tokenize --tokenizer "$tmp/vocab.bin" --out "$tmp/n" --jsonl - 2>&1); rc=$?
check "tokenize --jsonl: no document at all refused ($out)" exit_and_says $rc 1 "no document" "$out"
