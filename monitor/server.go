package monitor

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"
)

// The page: static HTML/JS/CSS (web/, embedded) that reads /api/swarms;
// nothing is fetched from other hosts.
//
//go:embed web
var webFiles embed.FS

// Report is one crawl's result, as /api/swarms serves it.
type Report struct {
	Updated time.Time `json:"updated"`
	// Took is the crawl's duration in seconds.
	Took    float64 `json:"took_s"`
	Monitor string  `json:"monitor"`
	Swarms  []Swarm `json:"swarms"`
	Error   string  `json:"error,omitempty"`
	Crawls  int     `json:"crawls"`
}

// Service crawls now and then and serves the latest report.
type Service struct {
	m   *Monitor
	log *zap.Logger

	mu     sync.Mutex
	report Report
}

// NewService serves m's crawls.
func NewService(m *Monitor) *Service {
	return &Service{m: m, log: m.log, report: Report{Monitor: m.ID().String(), Swarms: []Swarm{}}}
}

// Refresh crawls once and keeps the result (the error too: the page
// shows why it has nothing).
func (s *Service) Refresh(ctx context.Context) (Report, error) {
	start := time.Now()
	sw, err := s.m.Swarms(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.report.Crawls++
	s.report.Updated, s.report.Took = time.Now().UTC(), time.Since(start).Seconds()
	if err != nil {
		s.report.Error = err.Error()
	} else {
		s.report.Error, s.report.Swarms = "", sw
	}
	return s.report, err
}

// Run refreshes every interval until ctx ends.
func (s *Service) Run(ctx context.Context, every time.Duration) {
	for {
		if _, err := s.Refresh(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("crawl", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// Report is the latest report.
func (s *Service) Report() Report {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.report
}

// Handler serves the page at / and the report at /api/swarms.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	sub, _ := fs.Sub(webFiles, "web")
	static := http.FileServerFS(sub)
	mux.HandleFunc("GET /api/swarms", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(s.Report())
	})
	mux.Handle("GET /", static)
	return secure(mux)
}

func secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'")
		next.ServeHTTP(w, r)
	})
}

// WriteText prints swarms as the --once table.
func WriteText(w io.Writer, swarms []Swarm) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(swarms) == 0 {
		fmt.Fprintln(tw, "no swarm found")
	}
	for i, s := range swarms {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		fmt.Fprintf(tw, "swarm %s  model %s (%s), %d layers, map epoch %d\n", s.Name, orQ(s.Model), orQ(s.Fingerprint), s.Layers, s.MapEpoch)
		if s.Founder != "" {
			fmt.Fprintf(tw, "founder: %s (its signature on the swarm's charter)\n", s.Founder)
		}
		c := s.Coverage
		switch {
		case s.Layers == 0:
			fmt.Fprintln(tw, "coverage: unknown (no verified member)")
		case c.Covered:
			fmt.Fprintf(tw, "coverage: every layer covered, redundancy %d-%d\n", c.Min, c.Max)
		default:
			gaps := make([]string, len(c.Gaps))
			for j, g := range c.Gaps {
				gaps[j] = fmt.Sprintf("[%d,%d)", g.Start, g.End)
			}
			fmt.Fprintf(tw, "coverage: GAPS %s served by no node\n", strings.Join(gaps, " "))
		}
		runs := make([]string, len(c.Runs))
		for j, r := range c.Runs {
			runs[j] = fmt.Sprintf("[%d,%d)x%d", r.Start, r.End, r.Nodes)
		}
		fmt.Fprintf(tw, "redundancy: %s\n", strings.Join(runs, " "))
		fmt.Fprintf(tw, "served: %.2f tok/s; %d of %d nodes verified\n", s.TokensPerSec, s.Verified, len(s.Nodes))
		fmt.Fprintln(tw, "NODE\tSIGNED\tSTATE\tLAYERS\tREACHABILITY\tNAT\tLINKS\tASKED\tTOK/S\tNOTE")
		for _, n := range s.Nodes {
			signed, lay, asked := "yes", "-", "direct"
			if !n.Verified {
				signed = "NO"
			}
			if n.RangeEnd > n.RangeStart {
				lay = fmt.Sprintf("[%d,%d)", n.RangeStart, n.RangeEnd)
			}
			if n.Via != "" {
				asked = "via " + shortID(n.Via)
			}
			var links []string
			for _, k := range []string{"direct", "hole-punched", "relayed"} {
				if v := n.Links[k]; v > 0 {
					links = append(links, fmt.Sprintf("%d %s", v, k))
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t%s\n", shortID(n.ID), signed, orQ(n.State), lay, n.Reachability,
				orQ(n.NAT), strings.Join(links, ", "), asked, n.TokensPerSec, n.Error)
		}
	}
	return tw.Flush()
}

func orQ(s string) string {
	if s == "" {
		return "?"
	}
	return s
}

func shortID(s string) string {
	if len(s) > 12 {
		return "…" + s[len(s)-8:]
	}
	return s
}
