// Drives a Strata node's /v1/responses with the official openai client
// and prints one JSON object of what it saw; the Go test asserts on it.
// Usage: node responses.mjs BASE_URL TOOLS_BASE_URL FIXTURE_BASE_URL
//   BASE_URL: a swarm serving a generated model (text answers);
//   TOOLS_BASE_URL: a swarm whose model has a template with tool syntax
//     (a function-call round trip in the request);
//   FIXTURE_BASE_URL: a server answering a fixed Qwen3 output (a thought
//     and two calls) through the server's own Responses writer.
import OpenAI from "openai";

const [base, toolsBase, fixtureBase] = process.argv.slice(2);
const out = {};

// The text of a response's messages. (The SDK adds output_text to a
// whole response; the stream helper's finalResponse() has it only when
// it parses structured output.)
const textOf = (r) => r.output.filter((i) => i.type === "message")
  .flatMap((i) => i.content).filter((c) => c.type === "output_text").map((c) => c.text).join("");

const client = new OpenAI({ baseURL: base, apiKey: "unused", maxRetries: 0 });
const model = (await client.models.list()).data[0].id;
const params = { model, instructions: "You tell stories.", input: "Tell me a story.", max_output_tokens: 16, temperature: 0 };

// Whole.
const whole = await client.responses.create(params);
out.whole = { id: whole.id, object: whole.object, status: whole.status, outputText: whole.output_text, output: whole.output,
  usage: whole.usage, incomplete: whole.incomplete_details };

// Streamed through the SDK's stream helper: its events, the text it
// accumulates, and finalResponse().
const stream = client.responses.stream(params);
const types = [];
const seqs = [];
let deltas = "";
let snapshot = "";
stream.on("response.output_text.delta", (e) => {
  deltas += e.delta;
  snapshot = e.snapshot;
});
for await (const ev of stream) {
  types.push(ev.type);
  seqs.push(ev.sequence_number);
}
const final = await stream.finalResponse();
out.streamed = { types, seqs, deltas, snapshot, outputText: textOf(final), status: final.status, usage: final.usage,
  output: final.output };

// Streamed raw (create with stream: true).
const raw = await client.responses.create({ ...params, stream: true });
let rawText = "";
let rawCompleted = null;
for await (const ev of raw) {
  if (ev.type === "response.output_text.delta") rawText += ev.delta;
  if (ev.type === "response.completed") rawCompleted = ev.response.status;
}
out.raw = { text: rawText, completed: rawCompleted };

// What cannot be honoured: a 400 naming the field.
async function refusal(p) {
  try {
    await client.responses.create(p);
    return "no error";
  } catch (e) {
    return { status: e.status, param: e.param, code: e.code, badRequest: e instanceof OpenAI.BadRequestError, message: e.message };
  }
}
out.previousResponse = await refusal({ ...params, previous_response_id: "resp_123" });
out.webSearch = await refusal({ ...params, tools: [{ type: "web_search" }] });

// A function-call round trip in the request, on a model whose template
// has tool syntax: the tools, the call and its output render, and the
// answer comes.
const weather = { type: "function", name: "get_weather", description: "The weather in a city",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } };
const tc = new OpenAI({ baseURL: toolsBase, apiKey: "unused", maxRetries: 0 });
const toolsModel = (await tc.models.list()).data[0].id;
const toolParams = {
  model: toolsModel, max_output_tokens: 8, temperature: 0, tools: [weather],
  input: [
    { role: "user", content: "What is the weather in Paris?" },
    { type: "function_call", call_id: "call_1", name: "get_weather", arguments: JSON.stringify({ city: "Paris" }) },
    { type: "function_call_output", call_id: "call_1", output: "22 C and sunny" },
  ],
};
const tw = await tc.responses.create(toolParams);
const ts = await tc.responses.stream(toolParams).finalResponse();
out.tools = { whole: { status: tw.status, usage: tw.usage, outputText: tw.output_text, types: tw.output.map((i) => i.type) },
  streamed: { status: ts.status, usage: ts.usage, outputText: textOf(ts) } };

// The server's writer of parsed calls and thoughts, read by the SDK.
const fc = new OpenAI({ baseURL: fixtureBase, apiKey: "unused", maxRetries: 0 });
const fixtureParams = { model: "fixture", input: "Weather and time in Paris and Tokyo?",
  tools: [weather, { ...weather, name: "get_time", description: "The time in a city" }] };
const fw = await fc.responses.create(fixtureParams);
const fstream = fc.responses.stream(fixtureParams);
let args = "";
let argDeltas = 0;
let reasoning = "";
fstream.on("response.function_call_arguments.delta", (e) => { args += e.delta; argDeltas++; });
fstream.on("response.reasoning_text.delta", (e) => { reasoning += e.delta; });
const fs = await fstream.finalResponse();
out.fixture = { whole: fw.output, streamed: fs.output, args, argDeltas, reasoning, status: fs.status };

console.log(JSON.stringify(out));
