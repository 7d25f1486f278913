// Package api is a node's HTTP face: the OpenAI-compatible endpoints
// (GET /v1/models, POST /v1/completions, POST /v1/chat/completions,
// POST /v1/responses, with server-sent-event streaming), Anthropic's
// Messages API (POST /v1/messages), the swarm view (GET /v1/swarm), the
// health check (GET /healthz) and Prometheus metrics (GET /metrics), an
// optional API key, the dashboard, and the Go client that `strata chat`
// uses.
//
// It owns request decoding and validation (OpenAI field names, ranges and
// error JSON), the mapping of the node's sentinel errors to HTTP statuses,
// the wire shapes of responses and stream chunks, and the metrics
// registry of its server. It talks to the node only through Backend
// (NodeBackend adapts a *node.Node), which returns data
// (node.SwarmSnapshot: the replicated state and the peer table; the
// committed map; counters) and generations as a Stream, never the
// consensus replica or the swarm host, and takes the swarm's settings in
// the contract, so the handlers, streaming included, are unit-tested on
// a fake (backend_test.go, stream_test.go). It must not route, place
// layers, pick peers or touch sessions on its own. Everything about where a token is
// computed belongs to package node and, below it, layers and routing.
//
// # Log-probabilities and n
//
// /v1/chat/completions takes "logprobs": true and "top_logprobs" (0..20,
// only with logprobs) and answers each choice's
// "logprobs": {"content": [{token, logprob, bytes, top_logprobs:
// [{token, logprob, bytes}]}], "refusal": null}, one entry per sampled
// token; /v1/completions takes "logprobs": N (0..5) and answers OpenAI's
// legacy {tokens, token_logprobs, top_logprobs, text_offset}, where each
// top_logprobs object holds the N most likely tokens and the sampled one
// (so up to N+1 keys; a text two tokens share keeps the likelier).
// Streamed, each chunk carries the entries of the tokens it carries the
// text of; a token whose text is held back (part of a character, or what
// may begin a stop string) has its entry in the next chunk of its choice
// (at the latest the finish chunk). Every sampled token has an entry, the
// end token included (as token_ids and usage count them).
//
// A log-probability is of the model's own distribution at that position:
// the log-softmax of the raw logits the token was drawn from, before the
// repetition penalty, temperature, top-k and top-p (as OpenAI's and
// vLLM's default), so a token drawn at temperature 0.7 has the same
// logprob as at 1. They are computed on the last hop, beside the sampler,
// by engine.LogProbs (float64 sums in index order: a pure function of the
// logits, which the engine makes the same bits in any batch), and travel
// to the entry in the token frame (node's wire kind 8); only a request
// that asks pays for them. top_logprobs are sorted, most likely first,
// lower token ID first on ties; under greedy sampling the chosen token is
// the first. A token with no probability (a -Inf logit) reads -9999, as
// OpenAI writes it. A token's "token" is its text, or, when its bytes are
// not whole UTF-8 (part of a character), "bytes:" and the bytes as \xHH,
// as OpenAI writes such a token; "bytes" always holds the bytes.
// text_offset counts the characters (code points; an invalid byte
// counts one) of the completion's tokens before it, from 0: the prompt is
// not counted, as vLLM does without echo.
//
// "n" (1..8) asks for n choices, each a generation of its own with its own
// draw: choice i samples with seed engine.ChoiceSeed(seed, i) (choice 0
// keeps the request's seed), so a request with that seed and n = 1 gives
// choice i again. The first choice starts alone; the others start after
// its first token and take its path (node.Request.Follow), so their
// prefill resumes the prompt's KV from its hops (the prefix cache counts
// live sessions) instead of recomputing it. Streamed, the choices'
// chunks interleave as their tokens come, each naming its "index", each
// choice with its own finish chunk. usage.completion_tokens sums over the
// choices; the prompt counts once.
//
// # Dashboard
//
// GET / serves a page (web/, embedded with go:embed; plain HTML, JS and
// CSS, no build step, nothing fetched from elsewhere) and /ui/* its
// assets; neither needs the key, since they hold no data. The page shows
// the coverage of the layers (committed ranges, warmup ranges, gaps, an
// estimated tokens/s per layer from heartbeat latencies), the nodes
// (state, liveness, load, RTT, leader, voters, relayed, SIMULATED, the
// engine computing each node's layers), the
// requests this node took with their paths drawn over the coverage, the
// swarm's events, and a chat box that streams through
// /v1/chat/completions, or through /v1/completions for a model without a
// chat template. It is fed by one stream per page,
// GET /v1/swarm/events (text/event-stream): "swarm" events carry the
// /v1/swarm view when it changes, at most every 500 ms; "event" events
// (joined, left, liveness, state, epoch, pending, leader) come from one
// watcher per Server that diffs successive views; "request" events come
// from the generation handlers. GET /v1/swarm/activity answers both
// rings as JSON. EventSource cannot send headers, so the events endpoint,
// and only it, also takes the key as ?key= (compared in constant time);
// such a URL can land in logs, so put the node behind TLS where that
// matters.
//
// # Models without a chat template
//
// GET /v1/models (and the view's "model") says "chat_template": whether
// the model's file has its own. A chat request to a model without one is
// served in the engine's built-in format (Llama-2's [INST] for a
// SentencePiece vocabulary), which a base model such as stories260K never
// saw; so the client's callers (strata chat) and the dashboard send plain
// completions to such a model instead (ModelEntry.PlainCompletion).
//
// # Responses and Messages
//
// POST /v1/responses (OpenAI's Responses API, responses.go) and POST
// /v1/messages (Anthropic's Messages API, messages.go) are translations
// onto the chat path: each decodes into the same request as a chat
// completion (messages for the model's chat template, tools, sampling)
// and runs through the same generation, output parser, keep-alives,
// metrics (endpoint labels "responses" and "messages") and dashboard
// record; only the answer's wire shape differs (shape.go). The parsed
// output becomes blocks in order (a run of reasoning, a run of text, one
// block per tool call), which a whole answer lists and a stream sends as
// they open, grow and close, so that the two agree.
//
// /v1/responses takes input as a string or a list of items: messages
// (user, assistant, system, developer; content a string or input_text /
// output_text parts), function_call and function_call_output items (a
// tool round trip), reasoning items (dropped, as templates drop past
// thoughts); instructions (a system message, merged with a leading
// system or developer message), flat function tools, tool_choice (auto,
// none, required, or a named function), text.format (text, json_object,
// json_schema; see Constrained decoding), max_output_tokens, temperature, top_p, stream, and
// reasoning.effort "none" (enable_thinking false for templates that read
// it; other efforts change nothing). The answer's output has a reasoning
// item for a parsed thought, a message with output_text, and a
// function_call item per call; a generation cut by max_output_tokens is
// status "incomplete" (incomplete_details.reason "max_output_tokens").
// The stream sends OpenAI's typed events, numbered by sequence_number,
// from response.created and response.in_progress to response.completed,
// which carries the final response whatever its status (as vLLM's
// does; the openai client's stream helper takes its final response from
// it); an error after the start is an "error" event. Nothing is stored:
// store is accepted (the answer says "store": false), and
// previous_response_id, conversation, item_reference items, background,
// stored prompts, built-in tools (web_search, file_search, ...), images
// and files, a schema the grammar cannot enforce, truncation "auto" and
// logprobs are 400s naming the field.
//
// /v1/messages takes model, max_tokens (required), system (a string or
// text blocks), messages with content as a string or blocks (text;
// tool_use in an assistant turn; tool_result, a string or text blocks,
// in a user turn; thinking blocks dropped), tools {name, description,
// input_schema}, tool_choice (auto, none, any, or a named tool),
// output_format (json_schema), stop_sequences, temperature,
// top_p, top_k, stream, and thinking {"type": "disabled"}
// (enable_thinking false). The answer's content has a thinking block for
// a parsed thought (its signature empty), text blocks, and a tool_use
// block per call (its input the call's arguments); stop_reason is
// end_turn, max_tokens, stop_sequence (with stop_sequence, the string
// that matched) or tool_use. The stream sends Anthropic's named events:
// message_start (usage.input_tokens known), ping, content_block_start /
// content_block_delta (text_delta, thinking_delta, input_json_delta) /
// content_block_stop per block, message_delta (stop_reason, usage) and
// message_stop. Images and documents, server tools (versioned types such
// as web_search_20250305), mcp_servers, a last assistant message (a
// prefill: the answer is always a new turn) are 400s. Its errors, before a stream or as a stream's "error" event,
// are Anthropic's JSON, {"type": "error", "error": {"type", "message"}},
// with the status the table below gives (503s as overloaded_error); the
// key may come as x-api-key, which every endpoint takes beside Bearer.
//
// # Constrained decoding
//
// response_format (chat: json_object, or json_schema with its schema),
// text.format (responses), output_format (messages) and a tool_choice that forces a call (chat's
// "required" or a named function, the Responses API's alike, Anthropic's
// "any" or a named tool) become a grammar.Spec on the request
// (constrain.go): the last hop of the path masks every token that
// cannot continue the document, and allows an end token only once it is
// complete. A forced call is written in the model family's tool-call
// syntax (Hermes, Llama 3 JSON, Mistral, DeepSeek) with arguments valid
// against the tool's parameters, so the family's parser reads it back as
// a call; a family without one is a 400 naming tools. Schema keywords the
// grammar cannot enforce (pattern, format, allOf, oneOf of several, not,
// if/then/else, number bounds, ...) are 400s naming the field. docs/api.md
// lists what each endpoint takes.
//
// # Scheduling profiles
//
// A generation request picks the node's scheduling profile (see
// routing.SchedulerConfig) by the body field "profile" or the header
// X-Strata-Profile; the body wins, and neither means the configured
// default. GET /v1/swarm/scheduler shows the effective configuration and
// the filter, scorer and picker names a configuration may use.
//
// # Queueing
//
// A request that finds no path with KV room waits in the entry's queue
// (FIFO) for up to its "queue_timeout" in seconds (body field, or the
// header X-Strata-Queue-Timeout; 0 means do not wait; default the node's
// --queue-timeout, 30 s) and is answered 503 no_capacity with Retry-After
// only when that passes or the queue is full (--queue-max), the message
// saying what it waited for. A swarm whose members cannot hold every
// layer between them (node.ErrUncovered: no map committed, or the only
// holders of some layers left) has no path to wait for: a request is
// answered 503 layers_uncovered at once, naming the layers no node holds
// and what the swarm waits for. A request's X-Strata-Queue-Wait header,
// answered or refused, says how long it waited, in seconds.
// /healthz?ready=1 answers 200 only once this node can route a full path,
// and says why not in "not_ready" (as GET /v1/swarm does in "routable"
// and "not_ready").
//
// # Errors
//
// Every error is OpenAI's JSON, {"error":{"message","type","param","code"}}
// (but /v1/messages's, in Anthropic's shape, above):
//
//	status  type                   code                     when
//	400     invalid_request_error  invalid_request          malformed JSON, a bad field, n outside 1..8, top_logprobs outside 0..20, ...
//	400     invalid_request_error  unknown_profile          the request names a scheduling profile the node lacks
//	401     invalid_request_error  invalid_api_key          the API key is set and the request lacks it
//	404     invalid_request_error  model_not_found          the request names a model the swarm does not serve
//	404     invalid_request_error  not_found                no such endpoint
//	405     invalid_request_error  method_not_allowed       e.g. GET /v1/chat/completions
//	413     invalid_request_error  context_length_exceeded  prompt + max_tokens beyond the model's context
//	413     invalid_request_error  request_too_large        the body is over the server's cap
//	503     server_error           no_capacity              no path with room within the queue timeout, or the queue is full (Retry-After)
//	503     server_error           layers_uncovered         at once: the nodes cannot hold every layer; more must join (Retry-After)
//	503     server_error           session_lost             a generation could not continue (Retry-After)
//	503     server_error           draining / shutting_down this node is leaving (Retry-After)
//	500     server_error           internal_error           anything else
//
// A streaming request that has started (status 200 sent) and then cannot
// continue ends with one SSE event carrying the same error JSON, with no
// "data: [DONE]" after it: a client never mistakes a cut for an end.
//
// # Lifecycle
//
// New builds a Server and starts its dashboard watcher; Start (or Serve)
// serves it. Close and Shutdown stop the watcher and end the dashboard's
// event streams at once (they would otherwise never end). Shutdown is graceful:
// it stops accepting connections and waits for running requests, streams
// included, until its context ends, then cuts what is left (each stream
// still gets its error event). Drain is the first half of a node's drain:
// new generations get 503 with Retry-After and /healthz turns 503, while
// the generations already running carry on; WaitIdle waits for them.
package api
