// Prints, for each vocabulary named on the command line, what Hugging
// Face's tokenizer (transformers.js, via @lenml/tokenizers) makes of each
// string of the JSON array read on stdin: "ids" with
// add_special_tokens=false, "bos" with add_special_tokens=true, and
// "pieces", the pre-tokenizer's pieces of the normalized string (null for
// a vocabulary without a pre-tokenizer). The name "o200k_base" is
// tiktoken's o200k_base (js-tiktoken) instead, every string encoded as
// ordinary text: {"ids": [...]}.
// With no names on the command line, stdin is instead {"vocab": [strings],
// ...}: each vocabulary encodes its own strings.
// Output: {"vocab": {"ids": [[...], ...], "bos": [...], "pieces": [...]}, ...}.
import { readFileSync } from "node:fs";

const input = JSON.parse(readFileSync(0, "utf8"));
const names = Array.isArray(input) ? process.argv.slice(2) : Object.keys(input);
const out = {};
for (const name of names) {
  const corpus = Array.isArray(input) ? input : input[name];
  if (name === "o200k_base") {
    const { Tiktoken } = await import("js-tiktoken/lite");
    const { default: ranks } = await import("js-tiktoken/ranks/o200k_base");
    const enc = new Tiktoken(ranks);
    out[name] = { ids: corpus.map((s) => enc.encode(s, [], [])) };
    continue;
  }
  const { fromPreTrained } = await import(`@lenml/tokenizer-${name}`);
  const tok = fromPreTrained();
  const pieces = (s) => {
    if (tok.pre_tokenizer == null) return null;
    const x = tok.normalizer == null ? s : tok.normalizer(s);
    return x.length === 0 ? [] : tok.pre_tokenizer(x, { section_index: 0 });
  };
  out[name] = {
    ids: corpus.map((s) => Array.from(tok.encode(s, { add_special_tokens: false }))),
    bos: corpus.map((s) => Array.from(tok.encode(s, { add_special_tokens: true }))),
    pieces: corpus.map(pieces),
  };
}
process.stdout.write(JSON.stringify(out));
