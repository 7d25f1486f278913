// Structured outputs and forced tool calls through the official openai
// client, each document validated by ajv (an independent JSON Schema
// validator) against the schema the client sent. Prints one JSON object.
// Usage: node structured.mjs BASE_URL TOOLS_BASE_URL COUNT
//   BASE_URL: a swarm serving a generated (random-weight) model;
//   TOOLS_BASE_URL: a swarm whose model's template has Hermes tool syntax;
//   COUNT: how many chat documents to ask for.
import OpenAI from "openai";
import { zodResponseFormat, zodTextFormat } from "openai/helpers/zod";
import { z } from "zod";
import Ajv from "ajv";

const [base, toolsBase, countArg] = process.argv.slice(2);
const count = Number(countArg);
const out = {};
const ajv = new Ajv({ strict: false });

// A schema of every kind the grammar supports: bounded strings (a random
// model must be able to end its document), an integer range, numbers,
// an enum, a nullable, an array, a nested object and a literal.
const Item = z.object({
  name: z.string().max(8),
  qty: z.number().int().min(0).max(500),
  price: z.number(),
  kind: z.enum(["tool", "food", "toy"]),
  note: z.string().max(4).nullable(),
  tags: z.array(z.boolean()).max(3),
  dims: z.object({ w: z.number().int(), h: z.number().int() }),
  version: z.literal(2),
});
const format = zodResponseFormat(Item, "item");
out.schema = format.json_schema.schema;
const validate = ajv.compile(format.json_schema.schema);

const client = new OpenAI({ baseURL: base, apiKey: "unused", maxRetries: 0 });
const model = (await client.models.list()).data[0].id;

// count documents, a few at a time; each its own seed.
const chat = { total: 0, valid: 0, parsed: 0, finish: {}, failures: [] };
const one = async (i) => {
  try {
    const r = await client.chat.completions.parse({ model, messages: [{ role: "user", content: `Describe item ${i}.` }],
      response_format: format, max_tokens: 400, temperature: 1, seed: i });
    const c = r.choices[0];
    chat.finish[c.finish_reason] = (chat.finish[c.finish_reason] ?? 0) + 1;
    if (c.message.parsed) chat.parsed++;
    if (validate(JSON.parse(c.message.content))) {
      chat.valid++;
    } else {
      chat.failures.push({ content: c.message.content, errors: validate.errors });
    }
  } catch (e) {
    chat.failures.push({ error: String(e) });
  }
  chat.total++;
};
for (let i = 0; i < count; i += 8) {
  await Promise.all(Array.from({ length: Math.min(8, count - i) }, (_, j) => one(i + j)));
}
chat.failures = chat.failures.slice(0, 3);
out.chat = chat;

// The Responses API's text.format, whole. Every sampled request here
// has its own seed, so that a run samples the same tokens each time: a
// random model without one ran a forced call past max_output_tokens
// in 1 of 64 tries (status "incomplete"; the forced
// calls took 119-200 of their 200 tokens).
const resp = await client.responses.parse({ model, input: "Describe an item.", text: { format: zodTextFormat(Item, "item") },
  max_output_tokens: 400, temperature: 1, seed: 0 });
out.responses = { status: resp.status, text: resp.output_text, valid: validate(JSON.parse(resp.output_text)), parsed: resp.output_parsed != null };

// json_object: any object.
const jo = await client.chat.completions.create({ model, messages: [{ role: "user", content: "JSON please." }],
  response_format: { type: "json_object" }, max_tokens: 48, temperature: 0 });
out.jsonObject = { content: jo.choices[0].message.content, finish: jo.choices[0].finish_reason };

// A schema the grammar cannot enforce: a 400 naming response_format.
try {
  await client.chat.completions.create({ model, messages: [{ role: "user", content: "x" }], max_tokens: 4,
    response_format: { type: "json_schema", json_schema: { name: "x", schema: { type: "string", pattern: "^a+$" } } } });
  out.unsupported = "no error";
} catch (e) {
  out.unsupported = { status: e.status, param: e.param ?? e.error?.param, message: e.message };
}

// Forced tool calls on a model with Hermes tool syntax: "required" (any
// of the tools) and a named one, whose arguments ajv checks against the
// tool's parameters.
const pick = { type: "object", properties: { unit: { type: "string", enum: ["c", "f"] }, days: { type: "integer", minimum: 1, maximum: 7 },
  city: { type: "string", maxLength: 6 } }, required: ["unit", "days", "city"], additionalProperties: false };
const clock = { type: "object", properties: { zone: { type: "string", enum: ["utc", "cet"] } }, required: ["zone"], additionalProperties: false };
const tools = [{ type: "function", function: { name: "get_forecast", parameters: pick, strict: true } },
  { type: "function", function: { name: "get_time", parameters: clock, strict: true } }];
const byName = { get_forecast: ajv.compile(pick), get_time: ajv.compile(clock) };
const tc = new OpenAI({ baseURL: toolsBase, apiKey: "unused", maxRetries: 0 });
const toolsModel = (await tc.models.list()).data[0].id;
out.tools = [];
for (const [i, choice] of [["required", "required"], ["named", { type: "function", function: { name: "get_time" } }],
  ["named", { type: "function", function: { name: "get_forecast" } }]].entries()) {
  const r = await tc.chat.completions.create({ model: toolsModel, messages: [{ role: "user", content: "Weather in Paris?" }], tools,
    tool_choice: choice[1], max_tokens: 200, temperature: 1, seed: i });
  const c = r.choices[0];
  const calls = c.message.tool_calls ?? [];
  out.tools.push({ choice: choice[0], want: choice[1].function?.name ?? null, finish: c.finish_reason, content: c.message.content,
    calls: calls.map((k) => ({ name: k.function.name, arguments: k.function.arguments,
      valid: byName[k.function.name] ? byName[k.function.name](JSON.parse(k.function.arguments)) : false })) });
}
// A forced call cut off by max_tokens, whole and through the client's
// stream helper: still a call, its arguments closed into JSON, the same
// both ways (the same seed samples the same tokens).
// (Not strict: the stream helper refuses to parse a strict call cut
// off, as OpenAI's own.)
const cutParams = { model: toolsModel, messages: [{ role: "user", content: "Weather in Paris?" }],
  tools: tools.map((k) => ({ ...k, function: { ...k.function, strict: false } })),
  tool_choice: { type: "function", function: { name: "get_forecast" } }, max_tokens: 110, temperature: 1, seed: 5 };
const cutWhole = (await tc.chat.completions.create(cutParams)).choices[0];
const cutStream = tc.chat.completions.stream({ ...cutParams, stream: true });
let cutDeltas = 0;
for await (const chunk of cutStream) {
  for (const d of chunk.choices[0]?.delta?.tool_calls ?? []) if (d.function?.arguments) cutDeltas++;
}
const cutStreamed = (await cutStream.finalChatCompletion()).choices[0];
const cutOf = (c) => ({ finish: c.finish_reason, content: c.message.content ?? null,
  calls: (c.message.tool_calls ?? []).map((k) => ({ name: k.function.name, arguments: k.function.arguments })) });
out.cut = { whole: cutOf(cutWhole), streamed: cutOf(cutStreamed), deltas: cutDeltas };
// The Responses API's named function.
const rt = await tc.responses.create({ model: toolsModel, input: "Weather in Paris?", max_output_tokens: 200, temperature: 1, seed: 3,
  tools: [{ type: "function", name: "get_forecast", parameters: pick, strict: true }], tool_choice: { type: "function", name: "get_forecast" } });
const fc = rt.output.filter((o) => o.type === "function_call");
out.responsesTool = { status: rt.status, calls: fc.map((k) => ({ name: k.name, valid: byName.get_forecast(JSON.parse(k.arguments)) })) };

console.log(JSON.stringify(out));
