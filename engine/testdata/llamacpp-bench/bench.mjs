// llama.cpp's side of `make bench-llamacpp`: one measurement of one GGUF
// file through node-llama-cpp's prebuilt CPU binaries (never a build from
// source), printed as one line of JSON on stdout. The Strata side is
// engine/internal/llamabench, which does the same three things:
//
//   node bench.mjs MODEL THREADS decode   [STEPS] [PROMPT]
//   node bench.mjs MODEL THREADS prefill  [TOKENS]
//   node bench.mjs MODEL THREADS batch16  [STEPS] [PROMPT]
//
// decode: a PROMPT-token prompt, then STEPS single-token decodes (greedy,
// generated tokens fed back, no stop at EOS); tok/s = STEPS / their time.
// A long PROMPT (llamabench -metrics ctx: 2,048 or 8,192) measures decode
// at that position; the context holds PROMPT + STEPS + 64 positions, its KV
// cache of node-llama-cpp's default types (F16) and flash attention at
// llama.cpp's "auto", both printed as llama.cpp resolved them.
// prefill: one evaluation of TOKENS token ids in one batch; tok/s =
// TOKENS / its time. batch16: a context with 16 sequences, each prefilled
// with its own prompt, then all 16 decoding at once (node-llama-cpp puts
// the 16 pending tokens into one llama_decode); tok/s = 16·STEPS / time.
// Only the timed region counts: model load, context creation, prompts and
// a warm-up step are outside it.
import {readFileSync} from "node:fs";
import {getLlama, GgmlType, LlamaLogLevel} from "node-llama-cpp";

const [modelPath, threadsArg, mode, arg1, arg2] = process.argv.slice(2);
if (!modelPath || !threadsArg || !["decode", "prefill", "batch16"].includes(mode)) {
    console.error("usage: node bench.mjs MODEL THREADS decode|prefill|batch16 [N] [PROMPT]");
    process.exit(2);
}
const threads = Number(threadsArg);
const setupLog = [];

// gpu: false and build: "never": the prebuilt CPU binaries of
// @node-llama-cpp/linux-x64 (a zen4/icelake/haswell/... ggml CPU variant
// chosen at run time) or an error, never a download or a compile.
const llama = await getLlama({
    gpu: false,
    build: "never",
    usePrebuiltBinaries: true,
    skipDownload: true,
    progressLogs: false,
    // info: llama.cpp's context setup says what "auto" flash attention
    // became; those lines are kept, the rest dropped, errors printed.
    logLevel: LlamaLogLevel.info,
    logger: (level, message) => {
        if (process.env.BENCH_LOG) console.error(`[${level}] ${message.trim()}`);
        if (/flash[_ ]att/i.test(message)) setupLog.push(message.trim());
        else if (level === LlamaLogLevel.error || level === LlamaLogLevel.fatal) console.error(message);
    },
    maxThreads: threads,
});
// useMmap: false reads the weights into memory, as engine.Open does.
const model = await llama.loadModel({modelPath, gpuLayers: 0, useMmap: false});
const vocab = model.fileInfo.metadata?.llama?.vocab_size
    ?? model.fileInfo.metadata?.tokenizer?.ggml?.tokens?.length;
if (!(vocab > 3)) throw new Error("no vocabulary size in the file");

// Token ids the same way the Strata side makes them: valid for the vocab,
// away from the special ids at the start.
function tokens(n, salt) {
    const out = [];
    for (let i = 0; i < n; i++)
        out.push(3 + (i * 37 + salt * 101) % Math.min(vocab - 3, 1000));
    return out;
}

const sampling = {temperature: 0, yieldEogToken: true};

// cpuVariant names the ggml CPU backend that ggml loaded for this CPU
// (libggml-cpu-VARIANT.so, mapped into this process).
function cpuVariant() {
    try {
        const m = readFileSync("/proc/self/maps", "utf8").match(/libggml-cpu-([a-z0-9_]+)\.so/);
        return m ? m[1] : "unknown";
    } catch {
        return "unknown";
    }
}

const ms = () => Number(process.hrtime.bigint()) / 1e6;
let result;

if (mode === "decode") {
    const steps = Number(arg1 ?? 64), promptLen = Number(arg2 ?? 16);
    const ctx = await model.createContext({contextSize: promptLen + steps + 64, batchSize: 512, threads, sequences: 1});
    const seq = ctx.getSequence();
    const prompt = tokens(promptLen, 0);
    // Warm-up: the prompt and one decode, outside the timed region.
    await seq.evaluateWithoutGeneratingNewTokens(prompt.slice(0, -1));
    let t0 = 0;
    const gen = seq.evaluate(prompt.slice(-1), sampling);
    try {
        let r = await gen.next(); // the prompt's last token: first logits
        if (r.done) throw new Error("generation ended at once");
        r = await gen.next(); // the warm-up decode
        t0 = ms();
        for (let i = 0; i < steps; i++) {
            r = await gen.next();
            if (r.done) throw new Error(`generation ended after ${i} tokens`);
        }
    } finally {
        const t1 = ms();
        result = {tokens: steps, seconds: (t1 - t0) / 1000};
        await gen.return();
    }
    const k = GgmlType[ctx.kvCacheKeyType] ?? String(ctx.kvCacheKeyType);
    const v = GgmlType[ctx.kvCacheValueType] ?? String(ctx.kvCacheValueType);
    result.kv_type = (k === v ? k : `${k}/${v}`).toLowerCase();
    result.kv_context = ctx.contextSize;
    // llama.cpp logs "flash_attn = auto", then, resolving it, "Flash
    // Attention enabled" (or disabled); a plain true/false is taken as set.
    const fa = setupLog.map((l) => l.match(/Flash Attention (enabled|disabled)|flash_attn\s*=\s*(true|false|enabled|disabled)\s*$/i)).find(Boolean);
    if (fa) result.flash_attention = /^(enabled|true)$/i.test(fa[1] ?? fa[2]);
    else if (typeof ctx.flashAttention === "boolean") result.flash_attention = ctx.flashAttention;
} else if (mode === "prefill") {
    const n = Number(arg1 ?? 512);
    const ctx = await model.createContext({contextSize: n + 64, batchSize: Math.max(512, n), threads, sequences: 1});
    const seq = ctx.getSequence();
    // Warm-up: a short evaluation, then an empty cache again.
    await seq.evaluateWithoutGeneratingNewTokens(tokens(8, 7));
    await seq.clearHistory();
    const prompt = tokens(n, 0);
    const t0 = ms();
    await seq.evaluateWithoutGeneratingNewTokens(prompt);
    result = {tokens: n, seconds: (ms() - t0) / 1000};
} else {
    const nseq = 16;
    const steps = Number(arg1 ?? 32), promptLen = Number(arg2 ?? 8);
    // contextSize is per sequence: node-llama-cpp reserves nseq times it.
    const ctx = await model.createContext({contextSize: promptLen + steps + 64, batchSize: 512, threads, sequences: nseq});
    const seqs = Array.from({length: nseq}, () => ctx.getSequence());
    const prompts = seqs.map((_, i) => tokens(promptLen, i + 1));
    await Promise.all(seqs.map((s, i) => s.evaluateWithoutGeneratingNewTokens(prompts[i].slice(0, -1))));
    // Each sequence evaluates its prompt's last token (together: one
    // batch of 16), then a warm-up decode; the timer starts when all 16
    // have done both, and stops when all 16 have made STEPS more tokens.
    let waiting = nseq, release, t0 = 0;
    const allReady = new Promise((r) => { release = r; });
    const barrier = async () => {
        if (--waiting === 0) {
            t0 = ms();
            release();
        }
        await allReady;
    };
    await Promise.all(seqs.map(async (s, i) => {
        const gen = s.evaluate(prompts[i].slice(-1), sampling);
        try {
            let r = await gen.next();
            if (!r.done) r = await gen.next(); // warm-up decode
            if (r.done) throw new Error("generation ended at once");
            await barrier();
            for (let k = 0; k < steps; k++) {
                r = await gen.next();
                if (r.done) throw new Error(`generation ended after ${k} tokens`);
            }
        } finally {
            await gen.return();
        }
    }));
    result = {tokens: nseq * steps, seconds: (ms() - t0) / 1000, sequences: nseq};
}

result.tok_s = result.tokens / result.seconds;
console.log(JSON.stringify({
    engine: "llama.cpp",
    mode,
    threads,
    model: modelPath,
    gpu: llama.gpu,
    build: llama.buildType,
    cpu_variant: cpuVariant(),
    ...result,
}));
await model.dispose();
await llama.dispose();
