package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/node/api"
)

func newChatCmd() *cobra.Command {
	var (
		apiURL, keyFile, model, system, message string
		profile, mode                           string
		maxTokens                               int
		temperature                             float64
		seed                                    int64
		wait                                    time.Duration
		names                                   map[string]string
	)
	cmd := &cobra.Command{
		Use:   "chat",
		Short: "chat with a Strata swarm through a node's API, streaming the replies",
		Long: `chat reads your messages one line at a time and streams each reply as the
swarm generates it, keeping the conversation's history. /reset forgets the
history, /quit (or end of input) leaves. Any node's API serves the whole swarm.

--message asks one question instead and prints the whole answer, the
pipeline path it took through the swarm, its time to first token and its
tokens per second. --wait first waits for the swarm to serve every layer.

A model whose file has no chat template (a base model, such as the shipped
testdata/models/stories260K.gguf) is not tuned for chat: chat says so and
uses plain completion (/v1/completions) instead, each line a text for the
model to continue, printed with its continuation ("text:" with --message).
--mode chat sends chat completions anyway, which the node renders in its
built-in format (Llama-2's [INST] for a SentencePiece vocabulary);
--mode completion always uses plain completion.`,
		Example: `  strata chat --api http://127.0.0.1:8080
  strata chat --api http://10.0.0.5:8080 --api-key-file ~/.strata/api-key --temperature 0
  strata chat --api http://127.0.0.1:5001 --message "Tell me a story" --max-tokens 32
  strata chat --api http://127.0.0.1:4403 --message "Once upon a time" --temperature 0   # a model without a chat template`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := apiClient(apiURL, keyFile)
			if err != nil {
				return err
			}
			o := api.ConverseOptions{Model: model, System: system, MaxTokens: maxTokens, Temperature: &temperature, Profile: profile}
			if cmd.Flags().Changed("seed") {
				o.Seed = &seed
			}
			if wait > 0 {
				if err := waitReady(cmd.Context(), c, wait); err != nil {
					return err
				}
			}
			if err := chooseMode(cmd.Context(), c, &o, mode, cmd.ErrOrStderr()); err != nil {
				return err
			}
			if cmd.Flags().Changed("message") {
				return askOnce(cmd.Context(), c, o, message, cmd.OutOrStdout(), peerNamer(names))
			}
			// A prompt only for a person at a terminal, not for piped input.
			if f, ok := cmd.InOrStdin().(*os.File); ok {
				if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
					o.Prompt = "> "
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return api.Converse(ctx, c, o, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&apiURL, "api", "http://127.0.0.1:8080", "a node's API URL")
	fl.StringVar(&keyFile, "api-key-file", "", "file holding the API key, if the node requires one")
	fl.StringVar(&model, "model", "", "model to ask for (default: the one the node serves)")
	fl.StringVar(&system, "system", "", "a system message to open the conversation with")
	fl.IntVar(&maxTokens, "max-tokens", 0, "cap on each reply's tokens (0: the node's default)")
	fl.Float64Var(&temperature, "temperature", 1, "sampling temperature, 0 to 2 (0: greedy)")
	fl.Int64Var(&seed, "seed", 0, "sampling seed, for reproducible replies (unset: a fresh one per reply)")
	fl.StringVar(&message, "message", "", "ask this one message, print the answer with its path and speed, and exit")
	fl.StringVar(&profile, "profile", "", "scheduling profile the node routes the replies with (default: the node's default)")
	fl.DurationVar(&wait, "wait", 0, "first wait up to this long for the swarm to serve every layer")
	fl.StringToStringVar(&names, "name", nil, "with --message, show peer ID as a name in the path (ID=NAME, repeatable)")
	fl.StringVar(&mode, "mode", "auto", "auto (plain completion for a model without a chat template, else chat), chat or completion")
	return cmd
}

// chooseMode names the model in o when it names none and sets
// o.Completion by mode: "auto" asks the server whether the model has a
// chat template (api.ModelEntry.PlainCompletion) and, when it has none,
// says on note that it uses plain completion.
func chooseMode(ctx context.Context, c *api.Client, o *api.ConverseOptions, mode string, note io.Writer) error {
	switch mode {
	case "chat", "completion":
		o.Completion = mode == "completion"
		if o.Model != "" {
			return nil
		}
	case "auto":
	default:
		return fmt.Errorf("chat: --mode %q: want auto, chat or completion", mode)
	}
	models, err := c.ModelEntries(ctx)
	if err != nil {
		return fmt.Errorf("listing models: %w", err)
	}
	if len(models) == 0 {
		return errors.New("the server lists no model")
	}
	m := models[0]
	if o.Model == "" {
		o.Model = m.ID
	} else if i := slices.IndexFunc(models, func(e api.ModelEntry) bool { return e.ID == o.Model }); i >= 0 {
		m = models[i]
	} else {
		return nil // not served: the request's error says so
	}
	if mode == "auto" && m.PlainCompletion() {
		o.Completion = true
		fmt.Fprintf(note, "this model (%s) has no chat template: using plain completion (/v1/completions); --mode chat forces chat\n", m.ID)
	}
	if o.Completion && o.System != "" {
		fmt.Fprintln(note, "--system is not used in plain completion")
	}
	return nil
}

// askOnce sends one chat completion (or, with o.Completion, one plain
// completion) and prints the answer, the path the swarm took and how
// fast it went. A completion prints as "text:", the prompt followed by
// its continuation.
func askOnce(ctx context.Context, c *api.Client, o api.ConverseOptions, message string, out io.Writer, name func(string) string) error {
	if o.Model == "" {
		m, err := c.FirstModel(ctx)
		if err != nil {
			return err
		}
		o.Model = m
	}
	start := time.Now()
	var (
		r   api.ChatReply
		err error
	)
	if o.Completion {
		r, err = c.Complete(ctx, api.CompletionRequest{Model: o.Model, Prompt: message, MaxTokens: o.MaxTokens,
			Temperature: o.Temperature, Seed: o.Seed, Profile: o.Profile})
	} else {
		var msgs []engine.Message
		if o.System != "" {
			msgs = append(msgs, engine.Message{Role: "system", Content: o.System})
		}
		msgs = append(msgs, engine.Message{Role: "user", Content: message})
		r, err = c.Chat(ctx, api.ChatRequest{Model: o.Model, Messages: msgs, MaxTokens: o.MaxTokens, Temperature: o.Temperature,
			Seed: o.Seed, Profile: o.Profile})
	}
	if err != nil {
		return err
	}
	took := time.Since(start)
	if o.Completion {
		fmt.Fprintf(out, "text: %s%s\n", message, r.Text)
	} else {
		fmt.Fprintf(out, "answer: %s\n", r.Text)
	}
	for i, p := range r.Paths {
		label := "path"
		if i > 0 {
			label = "replayed on"
		}
		fmt.Fprintf(out, "%s: %s\n", label, namePeers(p, name))
	}
	rate := 0.0
	if took > 0 {
		rate = float64(r.CompletionTokens) / took.Seconds()
	}
	fmt.Fprintf(out, "speed: %d prompt + %d completion tokens in %v (%.1f tokens/s), first token after %v\n",
		r.PromptTokens, r.CompletionTokens, took.Round(time.Millisecond), rate, r.TTFT.Round(100*time.Microsecond))
	return nil
}
