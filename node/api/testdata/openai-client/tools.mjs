// Reads a chat answer with tool calls through the official openai client,
// whole and streamed (the client's own stream helper accumulates the
// deltas and refuses a call missing its id, type, name or arguments);
// argDeltas are the streamed argument fragments of each call.
// Usage: node tools.mjs BASE_URL. Prints one JSON object.
import OpenAI from "openai";

const [base] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base, apiKey: "unused", maxRetries: 0 });
const params = {
  model: "fixture",
  messages: [{ role: "user", content: "Weather and time in Paris and Tokyo?" }],
  tools: [
    { type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } } } },
    { type: "function", function: { name: "get_time", parameters: { type: "object", properties: { city: { type: "string" } } } } },
  ],
};
const whole = await client.chat.completions.create(params);
const stream = client.chat.completions.stream({ ...params, stream: true });
let reasoning = "";
const argDeltas = {}; // by call index: the argument fragments, as they came
for await (const chunk of stream) {
  reasoning += chunk.choices[0]?.delta?.reasoning_content ?? "";
  for (const tc of chunk.choices[0]?.delta?.tool_calls ?? []) {
    if (tc.function?.arguments) (argDeltas[tc.index] ??= []).push(tc.function.arguments);
  }
}
const final = await stream.finalChatCompletion();
console.log(JSON.stringify({
  whole: { message: whole.choices[0].message, finish: whole.choices[0].finish_reason },
  streamed: { message: final.choices[0].message, finish: final.choices[0].finish_reason, reasoning, argDeltas },
}));
