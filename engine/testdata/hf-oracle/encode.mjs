// Prints, for each vocabulary named on the command line, the token IDs that
// Hugging Face's tokenizer (transformers.js, via @lenml/tokenizers) gives for
// each string of the JSON array read on stdin, with add_special_tokens=false.
// Output: {"vocab": [[ids...], ...], ...}.
import { readFileSync } from "node:fs";

const corpus = JSON.parse(readFileSync(0, "utf8"));
const out = {};
for (const name of process.argv.slice(2)) {
  const { fromPreTrained } = await import(`@lenml/tokenizer-${name}`);
  const tok = fromPreTrained();
  out[name] = corpus.map((s) => Array.from(tok.encode(s, { add_special_tokens: false })));
}
process.stdout.write(JSON.stringify(out));
