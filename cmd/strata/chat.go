package main

import (
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/stratanet/strata/node/api"
)

func newChatCmd() *cobra.Command {
	var (
		apiURL, keyFile, model, system string
		maxTokens                      int
		temperature                    float64
		seed                           int64
	)
	cmd := &cobra.Command{
		Use:   "chat",
		Short: "chat with a Strata swarm through a node's API, streaming the replies",
		Long: `chat reads your messages one line at a time and streams each reply as the
swarm generates it, keeping the conversation's history. /reset forgets the
history, /quit (or end of input) leaves. Any node's API serves the whole swarm.`,
		Example: `  strata chat --api http://127.0.0.1:8080
  strata chat --api http://10.0.0.5:8080 --api-key-file ~/.strata/api-key --temperature 0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var opts []api.ClientOption
			if keyFile != "" {
				key, err := api.ReadKeyFile(keyFile)
				if err != nil {
					return err
				}
				opts = append(opts, api.WithClientKey(key))
			}
			c, err := api.NewClient(apiURL, opts...)
			if err != nil {
				return err
			}
			o := api.ConverseOptions{Model: model, System: system, MaxTokens: maxTokens, Temperature: &temperature}
			if cmd.Flags().Changed("seed") {
				o.Seed = &seed
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
	return cmd
}
