// A tool-calling loop through the official openai client, whole and
// streamed (the client's stream helper, finalChatCompletion): the model
// is made to call get_weather (a named tool_choice), the script runs the
// tool, sends its result back as a tool message, and asks again with
// tool_choice "none" for the answer. Prints each step and the messages
// it sent.
// Usage: node loop.mjs BASE_URL (a swarm whose template has tool syntax).
import OpenAI from "openai";

const [base] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base, apiKey: "unused", maxRetries: 0 });
const model = (await client.models.list()).data[0].id;
const tools = [{ type: "function", function: { name: "get_weather", description: "The weather in a city",
  parameters: { type: "object", properties: { city: { type: "string", enum: ["Paris", "Tokyo"] } }, required: ["city"], additionalProperties: false } } }];
const getWeather = ({ city }) => JSON.stringify({ city, temperature: city === "Paris" ? 21 : 17 });

async function loop(streamed) {
  const messages = [{ role: "user", content: "What is the weather in Paris?" }];
  const steps = [];
  // A forced call on a random-weight model may write long runs of
  // whitespace between its tokens: 200 tokens leave it room to end.
  for (const [choice, max] of [[{ type: "function", function: { name: "get_weather" } }, 200], ["none", 40]]) {
    const params = { model, messages: [...messages], tools, tool_choice: choice, max_tokens: max, temperature: 0 };
    const c = streamed
      ? await client.chat.completions.stream({ ...params, stream_options: { include_usage: true } }).finalChatCompletion()
      : await client.chat.completions.create(params);
    const m = c.choices[0].message;
    const calls = (m.tool_calls ?? []).map(({ id, type, function: { name, arguments: args } }) => ({ id, type, function: { name, arguments: args } }));
    steps.push({ finish: c.choices[0].finish_reason, content: m.content, calls, usage: c.usage, sent: params.messages });
    messages.push(calls.length ? { role: "assistant", content: m.content, tool_calls: calls } : { role: "assistant", content: m.content });
    for (const call of calls) {
      messages.push({ role: "tool", tool_call_id: call.id, content: getWeather(JSON.parse(call.function.arguments)) });
    }
  }
  return steps;
}

console.log(JSON.stringify({ whole: await loop(false), streamed: await loop(true) }));
