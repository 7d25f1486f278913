package cli

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/stratanet/strata/engine/store"
	"github.com/stratanet/strata/node"
	"github.com/stratanet/strata/node/config"
	"github.com/stratanet/strata/swarm"
)

const storeHelp = `Models go to the local store, $STRATA_HOME/models (default: strata/models
under the user cache directory, ~/.cache on Linux): each file once, named by
its sha256, and an index of names. HF_TOKEN is sent to the hub (not to its
CDN) for gated or private repositories; HF_ENDPOINT names a hub mirror.`

// resolveModel turns a --model value (a file, a store name, hf://… or an
// https:// URL) into the file to open, pulling hf:// and URL references
// the store lacks, with progress on stderr. strata node and strata
// generate both go through it.
func resolveModel(cmd *cobra.Command, model string) (string, error) {
	return store.Resolve(cmd.Context(), model, "", store.WithProgress(store.NewProgress(cmd.ErrOrStderr())))
}

func openStore() (*store.Store, error) {
	dir, err := store.DefaultDir()
	if err != nil {
		return nil, err
	}
	return store.Open(dir)
}

func newModelPullCmd() *cobra.Command {
	var parts int
	var revision string
	cmd := &cobra.Command{
		Use:   "pull REF",
		Short: "download a model into the local store (resumable, sha256-checked)",
		Long: `pull downloads a GGUF model from the Hugging Face hub or a URL into the local
store and names it REF. REF is one of:

  OWNER/REPO:QUANT             the repository's file with that quant in its name
                               (case-insensitive; a split model: all its parts)
  hf://OWNER/REPO              the repository's only GGUF model
  hf://OWNER/REPO/FILE.gguf    that file (a split model's part: all its parts)
  https://HOST/PATH/FILE.gguf  a plain URL

A broken download resumes where it stopped, within the pull and at the next
pull; big files come in parallel ranges (--parts). The file's sha256 must be
the one the hub publishes; a mismatch removes the partial file.

` + storeHelp,
		Example: `  strata model pull Qwen/Qwen2.5-0.5B-Instruct-GGUF:q4_k_m
  strata model pull hf://bartowski/Llama-3.2-1B-Instruct-GGUF/Llama-3.2-1B-Instruct-Q4_K_M.gguf
  strata node --model Qwen/Qwen2.5-0.5B-Instruct-GGUF:q4_k_m`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := openStore()
			if err != nil {
				return err
			}
			p, err := store.NewPuller(s, store.WithParts(parts), store.WithRevision(revision),
				store.WithProgress(store.NewProgress(cmd.ErrOrStderr())))
			if err != nil {
				return err
			}
			e, err := p.Pull(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			path, err := s.Path(e)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s\t%s\n", e.Name, store.HumanBytes(e.Size()), path)
			if !e.Verified {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: the server published no sha256 for %s; the file is unchecked\n", e.Name)
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&parts, "parts", 4, "parallel ranged connections per big file (1: one stream)")
	cmd.Flags().StringVar(&revision, "revision", "main", "hub revision: branch, tag or commit")
	return cmd
}

func newModelListCmd() *cobra.Command {
	var paths bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "list the models in the local store",
		Long:  "list prints the store's models: name, size, files, when pulled.\n\n" + storeHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := openStore()
			if err != nil {
				return err
			}
			list, err := s.List()
			if err != nil {
				return err
			}
			remote, err := s.ListRemote()
			if err != nil {
				return err
			}
			if len(list) == 0 && len(remote) == 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "no models in %s (strata model pull REF adds one)\n", s.Dir())
				return nil
			}
			if len(list) == 0 {
				return listRemote(cmd, remote)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			last := "PATH"
			if !paths {
				last = "SOURCE"
			}
			fmt.Fprintf(tw, "NAME\tSIZE\tFILES\tPULLED\t%s\n", last)
			for _, e := range list {
				col := e.Source
				if paths {
					if col, err = s.Path(e); err != nil {
						col = "broken: " + err.Error()
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", e.Name, store.HumanBytes(e.Size()), len(e.Parts), e.Pulled.Local().Format(time.DateTime), col)
			}
			if err := tw.Flush(); err != nil || len(remote) == 0 {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout())
			return listRemote(cmd, remote)
		},
	}
	cmd.Flags().BoolVar(&paths, "paths", false, "print each model's local file instead of its source")
	return cmd
}

func newModelRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME...",
		Short: "remove models from the local store (their files too, unless another name uses them)",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := openStore()
			if err != nil {
				return err
			}
			for _, n := range args {
				e, err := s.Remove(cmd.Context(), n)
				if errors.Is(err, store.ErrNotFound) {
					r, rerr := s.ForgetRemote(cmd.Context(), n)
					if rerr == nil {
						fmt.Fprintf(cmd.OutOrStdout(), "forgot %s (its slices stay in %s)\n", r.Name, r.Dir)
						continue
					}
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "removed %s (%s)\n", e.Name, store.HumanBytes(e.Size()))
			}
			return nil
		},
	}
}

// listRemote prints the models nodes joined by name without their file,
// with the slices they fetched (partial ranges).
func listRemote(cmd *cobra.Command, remote []store.Remote) error {
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "JOINED WITHOUT THE FILE\tFINGERPRINT\tSLICES (PARTIAL RANGES)\tSIZE\tDATA DIR\n")
	for _, r := range remote {
		sl, _ := node.Slices(r.Dir, r.Fingerprint)
		var ranges []string
		var size int64
		for _, s := range sl {
			ranges = append(ranges, fmt.Sprintf("[%d,%d)", s.Lo, s.Hi))
			size += s.Size
		}
		col := strings.Join(ranges, " ")
		if col == "" {
			col = "none yet"
		}
		fp := r.Fingerprint
		if len(fp) > 16 {
			fp = fp[:16]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Name, fp, col, store.HumanBytes(size), r.Dir)
	}
	return tw.Flush()
}

// joinableName reports whether a --model value the store lacks names a
// model a node may join without its file: a store name (OWNER/REPO:QUANT,
// hf://…), not a URL or a path.
func joinableName(model string) bool {
	if _, err := store.ParseRef(model); err != nil {
		return false
	}
	l := strings.ToLower(model)
	return !strings.HasPrefix(l, "http://") && !strings.HasPrefix(l, "https://")
}

// joinByName learns the fingerprint of the model the bootstrap peers
// serve, checks it against the one the store noted for the name at an
// earlier join, and notes it (with the data dir the slices go to).
func joinByName(cmd *cobra.Command, cfg config.Config, log *zap.Logger) (string, error) {
	opts, err := cfg.SwarmOptions(log.Named("probe"))
	if err != nil {
		return "", err
	}
	// A throwaway host: no identity of the node's, no port of its own.
	opts = append(opts, swarm.WithDataDir(""), swarm.WithListenAddrs("/ip4/127.0.0.1/tcp/0"), swarm.WithDiscovery(false),
		swarm.WithRelayService(false))
	boot := make([]peer.AddrInfo, 0, len(cfg.Bootstrap))
	for _, a := range cfg.Bootstrap {
		ai, err := peer.AddrInfoFromString(a)
		if err != nil {
			return "", fmt.Errorf("bootstrap %q: %w", a, err)
		}
		boot = append(boot, *ai)
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
	defer cancel()
	fp, err := node.SwarmModel(ctx, boot, opts...)
	if err != nil {
		return "", err
	}
	s, err := openStore()
	if err != nil {
		return "", err
	}
	switch r, err := s.LookupRemote(cfg.Model); {
	case err == nil && r.Fingerprint != fp:
		return "", fmt.Errorf("the swarm serves model %.16s, but %s was model %.16s when this store last joined it: name the model with --model-id, or strata model rm %s", fp, r.Name, r.Fingerprint, r.Name)
	case err != nil && !errors.Is(err, store.ErrNotFound):
		return "", err
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return "", err
	}
	if err := s.NoteRemote(cmd.Context(), store.Remote{Name: cfg.Model, Fingerprint: fp, Dir: dir}); err != nil {
		return "", err
	}
	return fp, nil
}
