// Drives a Strata node's /v1/messages with Anthropic's official client
// and prints one JSON object of what it saw; the Go test asserts on it.
// Usage: node check.mjs BASE_URL KEYED_BASE_URL KEY TOOLS_BASE_URL FIXTURE_BASE_URL
//   BASE_URL: a swarm serving a generated model (text answers), whose
//     name is MODEL;
//   KEYED_BASE_URL, KEY: a node that wants an API key;
//   TOOLS_BASE_URL: a swarm whose model has a template with tool syntax
//     (a tool_use/tool_result round trip in the request);
//   FIXTURE_BASE_URL: a server answering a fixed Qwen3 output (a thought
//     and two calls) through the server's own Messages writer.
// (The client appends /v1/messages to a base URL.)
import Anthropic from "@anthropic-ai/sdk";

const [base, keyedBase, key, toolsBase, fixtureBase, model, toolsModel] = process.argv.slice(2);
const out = {};

const client = new Anthropic({ baseURL: base, apiKey: "unused", maxRetries: 0 });
const params = { model, max_tokens: 16, temperature: 0, system: "You tell stories.",
  messages: [{ role: "user", content: "Tell me a story." }] };

// Whole.
const whole = await client.messages.create(params);
out.whole = whole;

// Streamed through the SDK's MessageStream: its events, the text it
// accumulates, and finalMessage().
const stream = client.messages.stream(params);
const events = [];
let text = "";
stream.on("text", (delta) => { text += delta; });
for await (const ev of stream) {
  events.push(ev.type);
}
const final = await stream.finalMessage();
out.streamed = { events, text, final };

// Streamed raw (create with stream: true).
const raw = await client.messages.create({ ...params, stream: true });
let rawText = "";
let rawStop = null;
for await (const ev of raw) {
  if (ev.type === "content_block_delta" && ev.delta.type === "text_delta") rawText += ev.delta.text;
  if (ev.type === "message_delta") rawStop = ev.delta.stop_reason;
}
out.raw = { text: rawText, stop: rawStop };

// Errors: Anthropic's shape, raised as the SDK's classes.
async function failure(c, p) {
  try {
    await c.messages.create(p);
    return "no error";
  } catch (e) {
    return { status: e.status, body: e.error, isAPIError: e instanceof Anthropic.APIError,
      badRequest: e instanceof Anthropic.BadRequestError, auth: e instanceof Anthropic.AuthenticationError };
  }
}
out.image = await failure(client, { ...params, messages: [{ role: "user", content: [
  { type: "text", text: "What is this?" },
  { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } }] }] });
out.anyTool = await failure(client, { ...params, tool_choice: { type: "any" },
  tools: [{ name: "f", description: "f", input_schema: { type: "object", properties: {} } }] });
out.wrongKey = await failure(new Anthropic({ baseURL: keyedBase, apiKey: "not-the-key", maxRetries: 0 }), params);
const keyed = await new Anthropic({ baseURL: keyedBase, apiKey: key, maxRetries: 0 }).messages.create({ ...params, max_tokens: 2 });
out.rightKey = { type: keyed.type, stop: keyed.stop_reason };

// A tool_use/tool_result round trip in the request, on a model whose
// template has tool syntax: the tools, the call and its result render,
// and the answer comes.
const weather = { name: "get_weather", description: "The weather in a city",
  input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } };
const tc = new Anthropic({ baseURL: toolsBase, apiKey: "unused", maxRetries: 0 });
const toolParams = {
  model: toolsModel, max_tokens: 8, temperature: 0, tools: [weather],
  messages: [
    { role: "user", content: "What is the weather in Paris?" },
    { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "22 C and sunny" }] },
  ],
};
const tw = await tc.messages.create(toolParams);
const ts = await tc.messages.stream(toolParams).finalMessage();
out.tools = { whole: tw, streamed: ts };

// Forced calls: tool_choice any and a named tool constrain the answer to
// one call whose input follows the tool's input_schema.
const forecast = { name: "get_forecast", description: "The forecast",
  input_schema: { type: "object", properties: { unit: { type: "string", enum: ["c", "f"] }, days: { type: "integer", minimum: 1, maximum: 7 } },
    required: ["unit", "days"], additionalProperties: false } };
const clock = { name: "get_time", description: "The time",
  input_schema: { type: "object", properties: { zone: { type: "string", enum: ["utc", "cet"] } }, required: ["zone"], additionalProperties: false } };
out.forced = [];
// Each with a seed (the server's extension), so that a run samples the
// same tokens each time.
for (const [seed, choice] of [{ type: "any" }, { type: "tool", name: "get_forecast" }].entries()) {
  const m = await tc.messages.create({ model: toolsModel, max_tokens: 200, temperature: 1, seed, tools: [clock, forecast], tool_choice: choice,
    messages: [{ role: "user", content: "The forecast for Paris?" }] });
  out.forced.push({ choice: choice.type, stop: m.stop_reason, content: m.content });
}

// The server's writer of parsed calls and thoughts, read by the SDK.
const fc = new Anthropic({ baseURL: fixtureBase, apiKey: "unused", maxRetries: 0 });
const fixtureParams = { model: "fixture", max_tokens: 64, messages: [{ role: "user", content: "Weather and time in Paris and Tokyo?" }],
  tools: [weather, { ...weather, name: "get_time", description: "The time in a city" }] };
const fw = await fc.messages.create(fixtureParams);
const fstream = fc.messages.stream(fixtureParams);
let thinking = "";
const inputs = [];
fstream.on("thinking", (delta) => { thinking += delta; });
fstream.on("inputJson", (_partial, snapshot) => { inputs.push(snapshot); });
const fs = await fstream.finalMessage();
out.fixture = { whole: fw, streamed: fs, thinking, inputs };

// count_tokens: the input tokens of the same requests, without max_tokens.
const { max_tokens: _drop, ...toolCount } = toolParams;
out.count = {
  plain: await client.messages.countTokens({ model, system: params.system, messages: params.messages }),
  tools: await tc.messages.countTokens(toolCount),
};

console.log(JSON.stringify(out));
