// Renders chat templates with @huggingface/jinja, the oracle of the Go
// template tests. stdin: a JSON array of {"template": T, "case": C,
// "bos_token": B, "eos_token": E}, C as `strata debug chat-template --chat`
// reads it. stdout: a JSON array of {"text": ...} or {"error": ...}.
import { readFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";

// The library's own strftime_now reads the clock: pin the clock to the
// case's "now" (run with TZ=UTC) by replacing Date's no-argument form.
const RealDate = Date;
let pinned = 0;
globalThis.Date = class extends RealDate {
  constructor(...args) {
    if (args.length === 0) super(pinned);
    else super(...args);
  }
};

const jobs = JSON.parse(readFileSync(0, "utf8"));
const out = jobs.map(({ template, case: c, bos_token, eos_token }) => {
  try {
    pinned = RealDate.parse((c.now ?? "2024-07-26") + "T00:00:00Z");
    const ctx = {
      ...(c.extra ?? {}),
      messages: c.messages,
      add_generation_prompt: c.add_generation_prompt ?? false,
      bos_token: bos_token ?? "",
      eos_token: eos_token ?? "",
    };
    if (c.tools != null) ctx.tools = c.tools;
    return { text: new Template(template).render(ctx) };
  } catch (e) {
    return { error: String(e.message ?? e) };
  }
});
process.stdout.write(JSON.stringify(out));
