// Drives a Strata swarm's API with the official openai client and prints
// one JSON object of what it saw; the Go test asserts on it.
// Usage: node check.mjs BASE_URL KEYED_BASE_URL KEY
import OpenAI from "openai";

const [base, keyedBase, key] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base, apiKey: "unused", maxRetries: 0 });
const out = {};

const models = await client.models.list();
out.models = models.data.map((m) => m.id);
const model = out.models[0];

const comp = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 16, temperature: 0 });
out.completion = comp.choices[0].text;
out.completionUsage = comp.usage;

const messages = [{ role: "user", content: "Tell me a story." }];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0 });
out.chat = chat.choices[0].message.content;
out.chatFinish = chat.choices[0].finish_reason;

const stream = await client.chat.completions.create({ model, messages, max_tokens: 16, temperature: 0, stream: true });
let streamed = "";
let chunks = 0;
for await (const chunk of stream) {
  chunks++;
  streamed += chunk.choices[0]?.delta?.content ?? "";
}
out.streamed = streamed;
out.chunks = chunks;

// Log-probabilities, whole and streamed, and n = 2, as the client types them.
const lp = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 3 });
out.chatLogprobs = lp.choices[0].logprobs;
out.chatLogprobsUsage = lp.usage;
const lpStream = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 3, stream: true });
out.streamedLogprobs = [];
for await (const chunk of lpStream) {
  for (const c of chunk.choices) out.streamedLogprobs.push(...(c.logprobs?.content ?? []));
}
const two = await client.chat.completions.create({ model, messages, max_tokens: 8, temperature: 1, seed: 3, n: 2 });
out.nIndices = two.choices.map((c) => c.index);
out.nUsage = two.usage;
const legacy = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 6, temperature: 0, logprobs: 2 });
out.legacyLogprobs = legacy.choices[0].logprobs;

try {
  await client.chat.completions.create({ model: "no-such-model", messages, max_tokens: 4 });
  out.unknownModel = "no error";
} catch (e) {
  out.unknownModel = { status: e.status, isAPIError: e instanceof OpenAI.APIError, notFound: e instanceof OpenAI.NotFoundError, code: e.code ?? e.error?.code };
}

const wrong = new OpenAI({ baseURL: keyedBase, apiKey: "not-the-key", maxRetries: 0 });
try {
  await wrong.models.list();
  out.wrongKey = "no error";
} catch (e) {
  out.wrongKey = { status: e.status, auth: e instanceof OpenAI.AuthenticationError };
}
const right = new OpenAI({ baseURL: keyedBase, apiKey: key, maxRetries: 0 });
out.rightKeyModels = (await right.models.list()).data.length;

console.log(JSON.stringify(out));
