// The Vercel AI SDK's own multi-step tool loop (generateText, then
// streamText) against a Strata node through @ai-sdk/openai-compatible:
// step 0 forces get_weather, step 1 forces convert (toolChoice
// {type: "tool"}), step 2 asks for text (toolChoice "none"). The tools'
// execute functions run here; the SDK sends their results back. A fetch
// wrapper keeps each request body the SDK sent; a streamed run keeps
// each call's tool-input-delta parts (its arguments as they streamed).
// Usage: node agent.mjs BASE_URL. Prints one JSON object.
import { generateText, streamText, stepCountIs, tool } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { z } from "zod";

const [base] = process.argv.slice(2);

const tools = {
  get_weather: tool({
    description: "The current temperature in a city, in degrees Celsius",
    inputSchema: z.object({ city: z.string().max(8) }),
    execute: async ({ city }) => ({ city, temperature: 20 + city.length, unit: "celsius" }),
  }),
  convert: tool({
    description: "Converts a temperature in degrees Celsius to another unit",
    inputSchema: z.object({ temperature: z.number(), unit: z.enum(["fahrenheit", "kelvin"]) }),
    execute: async ({ temperature, unit }) => ({ value: unit === "kelvin" ? temperature + 273.15 : temperature * 1.8 + 32, unit }),
  }),
};

// One run of the loop; streamed picks streamText.
async function run(streamed) {
  const requests = [];
  const provider = createOpenAICompatible({
    name: "strata",
    baseURL: base,
    apiKey: "unused",
    includeUsage: true,
    fetch: async (url, init) => {
      requests.push({ url: String(url), body: JSON.parse(init.body) });
      return fetch(url, init);
    },
  });
  const model = provider.chatModel((await (await fetch(base + "/models")).json()).data[0].id);
  const opts = {
    model,
    tools,
    prompt: "What is the temperature in Paris in Fahrenheit?",
    stopWhen: stepCountIs(3),
    maxOutputTokens: 200,
    temperature: 1,
    seed: 7,
    maxRetries: 0,
    prepareStep: ({ stepNumber }) => ({
      toolChoice: ["get_weather", "convert"][stepNumber] ? { type: "tool", toolName: ["get_weather", "convert"][stepNumber] } : "none",
    }),
  };
  let steps, text, deltas = "";
  const inputDeltas = {}; // streamed: the tool-input-delta parts of each call

  if (streamed) {
    const r = streamText({ ...opts, onError: ({ error }) => { throw error; } });
    for await (const part of r.fullStream) {
      if (part.type === "text-delta") deltas += part.text;
      if (part.type === "tool-input-delta") (inputDeltas[part.id] ??= []).push(part.delta);
      if (part.type === "error") throw part.error;
    }
    steps = await r.steps;
    text = await r.text;
  } else {
    const r = await generateText(opts);
    steps = r.steps;
    text = r.text;
  }
  return {
    text,
    deltas,
    inputDeltas,
    requests,
    steps: steps.map((s) => ({
      finishReason: s.finishReason,
      rawFinishReason: s.rawFinishReason,
      usage: { inputTokens: s.usage.inputTokens, outputTokens: s.usage.outputTokens },
      text: s.text,
      toolCalls: s.toolCalls.map((c) => ({ toolCallId: c.toolCallId, toolName: c.toolName, input: c.input, invalid: c.invalid ?? false })),
      toolResults: s.toolResults.map((c) => ({ toolCallId: c.toolCallId, toolName: c.toolName, output: c.output })),
    })),
  };
}

console.log(JSON.stringify({ whole: await run(false), streamed: await run(true) }));
