package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/node/api"
)

func newChatCmd() *cobra.Command {
	var (
		apiURL, keyFile, model, system, message string
		profile                                 string
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
tokens per second. --wait first waits for the swarm to serve every layer.`,
		Example: `  strata chat --api http://127.0.0.1:8080
  strata chat --api http://10.0.0.5:8080 --api-key-file ~/.strata/api-key --temperature 0
  strata chat --api http://127.0.0.1:5001 --message "Tell me a story" --max-tokens 32`,
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
	return cmd
}

// askOnce sends one chat completion and prints the answer, the path the
// swarm took and how fast it went.
func askOnce(ctx context.Context, c *api.Client, o api.ConverseOptions, message string, out io.Writer, name func(string) string) error {
	if o.Model == "" {
		m, err := c.FirstModel(ctx)
		if err != nil {
			return err
		}
		o.Model = m
	}
	var msgs []engine.Message
	if o.System != "" {
		msgs = append(msgs, engine.Message{Role: "system", Content: o.System})
	}
	msgs = append(msgs, engine.Message{Role: "user", Content: message})
	start := time.Now()
	r, err := c.Chat(ctx, api.ChatRequest{Model: o.Model, Messages: msgs, MaxTokens: o.MaxTokens, Temperature: o.Temperature, Seed: o.Seed,
		Profile: o.Profile})
	if err != nil {
		return err
	}
	took := time.Since(start)
	fmt.Fprintf(out, "answer: %s\n", r.Text)
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
