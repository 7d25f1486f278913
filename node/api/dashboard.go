package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stratanet/strata/routing"
)

// The dashboard: a static page (web/, embedded) served at "/" and
// "/ui/...", fed by one server-sent-event stream per page
// (GET /v1/swarm/events). One watcher goroutine per Server reads the
// swarm view, diffs it with the previous one into discrete events, and
// publishes both to a hub that every event stream reads; the generation
// handlers add a record per request. Nothing here polls per client:
// a hundred open pages cost one view a tick.

//go:embed web
var webFiles embed.FS

// Dashboard tuning.
const (
	// dashTick is how often the watcher reads the swarm view.
	dashTick = 250 * time.Millisecond
	// dashMinPush is the least time between two swarm snapshots pushed to
	// the pages: a view that changes every tick (load, RTT) must not
	// become a stream of 100-member documents.
	dashMinPush = 500 * time.Millisecond
	// dashEvents and dashRequests size the rings a page gets on connect.
	dashEvents   = 256
	dashRequests = 64
)

// dashEventJSON is one discrete change of the swarm.
type dashEventJSON struct {
	Seq    uint64    `json:"seq"`
	Time   time.Time `json:"time"`
	Kind   string    `json:"kind"` // watching, joined, left, liveness, state, epoch, pending, pending_ended, leader
	Node   string    `json:"node,omitempty"`
	Epoch  uint64    `json:"epoch,omitempty"`
	Detail string    `json:"detail"`
}

// hopJSON is one hop of a request's path.
type hopJSON struct {
	Node string `json:"node"`
	From int    `json:"from"`
	To   int    `json:"to"`
}

// scoreJSON is a path's score as it won its route: the estimated
// seconds of the request and their split (routing.Breakdown).
type scoreJSON struct {
	Cost     float64 `json:"cost_s"`
	Latency  float64 `json:"latency_s"`
	Load     float64 `json:"load_s"`
	Locality float64 `json:"locality_s"`
	Other    float64 `json:"other_s"` // scorers such as prefix affinity
	// Unit rates the path in [0, 1] per built-in scorer, 1 best.
	Unit routing.Scores `json:"unit"`
}

// requestJSON is one generation request as the dashboard shows it.
type requestJSON struct {
	Seq        uint64      `json:"seq"`
	ID         string      `json:"id"`
	Time       time.Time   `json:"time"` // when it came in
	Endpoint   string      `json:"endpoint"`
	Stream     bool        `json:"stream"`
	Status     string      `json:"status"` // "ok" or the error code
	Paths      [][]hopJSON `json:"paths"`  // in order: a replay adds one
	Scores     []scoreJSON `json:"scores"` // each path's winning score
	Profile    string      `json:"profile"`
	Replays    int         `json:"replays"`
	TTFTMs     float64     `json:"ttft_ms"`
	DurationMs float64     `json:"duration_ms"`
	Prompt     int         `json:"prompt_tokens"`
	Tokens     int         `json:"completion_tokens"`
	TokensPerS float64     `json:"tokens_per_s"` // decode rate, after the first token
}

// hub holds what the event streams send: the latest swarm snapshot, and
// rings of events and requests, each item numbered so that a page that
// reconnects can skip what it has.
type hub struct {
	mu       sync.Mutex
	view     []byte // the latest swarm snapshot, JSON
	viewSeq  uint64
	seq      uint64 // the last number given to an event or a request
	events   []dashEventJSON
	requests []requestJSON
	notify   chan struct{} // closed and replaced on every change
}

func newHub() *hub { return &hub{notify: make(chan struct{})} }

func (h *hub) changed() {
	close(h.notify)
	h.notify = make(chan struct{})
}

func (h *hub) setView(b []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.view = b
	h.viewSeq++
	h.changed()
}

func (h *hub) addEvent(e dashEventJSON) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	e.Seq = h.seq
	h.events = pushRing(h.events, e, dashEvents)
	h.changed()
}

func (h *hub) addRequest(r requestJSON) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	r.Seq = h.seq
	h.requests = pushRing(h.requests, r, dashRequests)
	h.changed()
}

// pushRing appends v to a history of at most limit entries, dropping the
// oldest.
func pushRing[T any](s []T, v T, limit int) []T {
	s = append(s, v)
	if len(s) > limit {
		s = slices.Delete(s, 0, len(s)-limit)
	}
	return s
}

// since returns what a reader that has seen view viewSeq and items up to
// seq has not, and the channel that closes on the next change.
func (h *hub) since(viewSeq, seq uint64) (view []byte, vs uint64, evs []dashEventJSON, reqs []requestJSON, next <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.viewSeq != viewSeq {
		view = h.view
	}
	for _, e := range h.events {
		if e.Seq > seq {
			evs = append(evs, e)
		}
	}
	for _, r := range h.requests {
		if r.Seq > seq {
			reqs = append(reqs, r)
		}
	}
	return view, h.viewSeq, evs, reqs, h.notify
}

func (h *hub) recent() []requestJSON {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]requestJSON{}, h.requests...)
}

func (h *hub) recentEvents() []dashEventJSON {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]dashEventJSON{}, h.events...)
}

// dashboard serves the dashboard's event stream and activity rings from
// the hub its watcher fills; quit closes when the server stops.
type dashboard struct {
	views     views
	hub       *hub
	quit      <-chan struct{}
	keepAlive time.Duration
}

// watch reads the swarm view every tick until ctx ends: it turns the
// differences into events and publishes a snapshot when the view
// changed, at most every dashMinPush.
func (d *dashboard) watch(ctx context.Context) {
	t := time.NewTicker(dashTick)
	defer t.Stop()
	var prev *swarmJSON
	var lastKey []byte
	var lastPush time.Time
	for {
		v := d.views.swarmView()
		now := time.Now()
		if prev == nil {
			leader := "none"
			if v.Leader != nil {
				leader = short(*v.Leader)
			}
			d.hub.addEvent(dashEventJSON{Time: now, Kind: "watching", Epoch: v.Epoch,
				Detail: fmt.Sprintf("dashboard watching: epoch %d, %d members, leader %s", v.Epoch, len(v.Members), leader)})
		} else {
			for _, e := range diffViews(prev, &v) {
				e.Time = now
				d.hub.addEvent(e)
			}
		}
		prev = &v
		if key := viewKey(v); !bytes.Equal(key, lastKey) && now.Sub(lastPush) >= dashMinPush {
			if b, err := json.Marshal(v); err == nil {
				d.hub.setView(b)
				lastKey, lastPush = key, now
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// viewKey is the view without the figures that change on every read
// (the age of heartbeats), so that an idle swarm pushes nothing.
func viewKey(v swarmJSON) []byte {
	ms := make([]memberJSON, len(v.Members))
	copy(ms, v.Members)
	for i := range ms {
		if ms[i].Load != nil {
			l := *ms[i].Load
			l.AgeMs = 0
			ms[i].Load = &l
		}
		ms[i].RTTMs = float64(int(ms[i].RTTMs*10)) / 10
	}
	v.Members = ms
	b, _ := json.Marshal(v)
	return b
}

func short(id string) string {
	if len(id) > 8 {
		return "…" + id[len(id)-6:]
	}
	return id
}

// diffViews says what changed from a to b.
func diffViews(a, b *swarmJSON) []dashEventJSON {
	var out []dashEventJSON
	old := map[string]memberJSON{}
	for _, m := range a.Members {
		old[m.ID] = m
	}
	seen := map[string]bool{}
	for _, m := range b.Members {
		seen[m.ID] = true
		o, had := old[m.ID]
		switch {
		case m.Member && (!had || !o.Member):
			out = append(out, dashEventJSON{Kind: "joined", Node: m.ID,
				Detail: fmt.Sprintf("%s joined (%s)", short(m.ID), hwName(m))})
		case !m.Member && had && o.Member:
			out = append(out, dashEventJSON{Kind: "left", Node: m.ID, Detail: fmt.Sprintf("%s left the members", short(m.ID))})
		}
		if had && o.Liveness != m.Liveness && m.Liveness != "self" {
			out = append(out, dashEventJSON{Kind: "liveness", Node: m.ID,
				Detail: fmt.Sprintf("%s %s → %s", short(m.ID), o.Liveness, m.Liveness)})
		}
		if had && o.State != m.State && m.State != "" {
			out = append(out, dashEventJSON{Kind: "state", Node: m.ID,
				Detail: fmt.Sprintf("%s %s → %s", short(m.ID), orNone(o.State), m.State)})
		}
	}
	for _, o := range a.Members {
		if !seen[o.ID] && o.Member {
			out = append(out, dashEventJSON{Kind: "left", Node: o.ID, Detail: fmt.Sprintf("%s left", short(o.ID))})
		}
	}
	if b.Epoch != a.Epoch {
		var parts []string
		for _, st := range b.Committed.Stages {
			parts = append(parts, fmt.Sprintf("%s[%d,%d)", short(st.Node), st.Start, st.End))
		}
		out = append(out, dashEventJSON{Kind: "epoch", Epoch: b.Epoch,
			Detail: fmt.Sprintf("epoch %d committed: %s", b.Epoch, strings.Join(parts, " "))})
	}
	switch {
	case b.Pending != nil && (a.Pending == nil || a.Pending.Map.Epoch != b.Pending.Map.Epoch):
		out = append(out, dashEventJSON{Kind: "pending", Epoch: b.Pending.Map.Epoch,
			Detail: fmt.Sprintf("warmup of epoch %d started: %s", b.Pending.Map.Epoch, b.Pending.Reason)})
	case b.Pending == nil && a.Pending != nil && b.Epoch != a.Pending.Map.Epoch:
		out = append(out, dashEventJSON{Kind: "pending_ended", Epoch: a.Pending.Map.Epoch,
			Detail: fmt.Sprintf("warmup of epoch %d ended without a commit", a.Pending.Map.Epoch)})
	}
	if deref(a.Leader) != deref(b.Leader) {
		d := "no leader"
		if b.Leader != nil {
			d = "leader is now " + short(*b.Leader)
		}
		out = append(out, dashEventJSON{Kind: "leader", Node: deref(b.Leader), Detail: d})
	}
	return out
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

func hwName(m memberJSON) string {
	if m.Capabilities != nil && m.Capabilities.Hardware.Name != "" {
		return m.Capabilities.Hardware.Name
	}
	return "unknown device"
}

// hopRe reads one hop of routing.Path's text form, "node[from,to)".
var hopRe = regexp.MustCompile(`^(.+)\[(\d+),(\d+)\)$`)

// parsePath turns a path's text into hops; a part it cannot read keeps
// its text as the node so that nothing is dropped silently.
func parsePath(p string) []hopJSON {
	hops := []hopJSON{}
	for part := range strings.SplitSeq(p, " → ") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		m := hopRe.FindStringSubmatch(part)
		if m == nil {
			hops = append(hops, hopJSON{Node: part})
			continue
		}
		from, _ := strconv.Atoi(m[2])
		to, _ := strconv.Atoi(m[3])
		hops = append(hops, hopJSON{Node: m[1], From: from, To: to})
	}
	return hops
}

// handleEvents is the dashboard's stream: "swarm" events carry the view,
// "event" events the swarm's changes, "request" events the requests this
// node took, each with its seq (also the SSE id).
func (d *dashboard) handleEvents(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	out := &sse{w: w, rc: http.NewResponseController(w)}
	out.raw("retry: 2000\n\n")
	keep := time.NewTicker(d.keepAlive)
	defer keep.Stop()
	var viewSeq, seq uint64
	for out.err == nil {
		view, vs, evs, reqs, next := d.hub.since(viewSeq, seq)
		viewSeq = vs
		if view != nil {
			out.raw("event: swarm\ndata: " + string(view) + "\n\n")
		}
		for _, e := range evs {
			seq = max(seq, e.Seq)
			out.event("event", e.Seq, e)
		}
		for _, q := range reqs {
			seq = max(seq, q.Seq)
			out.event("request", q.Seq, q)
		}
		select {
		case <-next:
		case <-keep.C:
			out.raw(": keep-alive\n\n")
		case <-r.Context().Done():
			return
		case <-d.quit:
			return
		}
	}
}

func (e *sse) event(name string, id uint64, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		e.err = err
		return
	}
	e.raw(fmt.Sprintf("event: %s\nid: %d\ndata: %s\n\n", name, id, b))
}

type activityJSON struct {
	Requests []requestJSON   `json:"requests"`
	Events   []dashEventJSON `json:"events"`
}

// handleActivity answers the rings as JSON, for scripts and tests.
func (d *dashboard) handleActivity(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, activityJSON{Requests: d.hub.recent(), Events: d.hub.recentEvents()})
}

// allowsQuery accepts the key as ?key=: EventSource cannot send an
// Authorization header. Only the events endpoint takes it, since a URL
// may land in logs and browser history.
func (k apiKey) allowsQuery(r *http.Request) bool {
	q := r.URL.Query().Get("key")
	if q == "" {
		return false
	}
	sum := sha256.Sum256([]byte(q))
	return subtle.ConstantTimeCompare(sum[:], k) == 1
}

// webAsset is one embedded file, with its ETag.
type webAsset struct {
	body  []byte
	ctype string
	etag  string
}

var (
	webOnce   sync.Once
	webAssets map[string]webAsset
)

func assets() map[string]webAsset {
	webOnce.Do(func() {
		webAssets = map[string]webAsset{}
		sub, _ := fs.Sub(webFiles, "web")
		_ = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := fs.ReadFile(sub, p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			ct := mime.TypeByExtension(path.Ext(p))
			if ct == "" {
				ct = "application/octet-stream"
			}
			webAssets[p] = webAsset{body: b, ctype: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
			return nil
		})
	})
	return webAssets
}

// serveAsset writes an embedded file; it reports false when there is
// none by that name.
func serveAsset(w http.ResponseWriter, r *http.Request, name string) bool {
	a, ok := assets()[name]
	if !ok {
		return false
	}
	h := w.Header()
	h.Set("Content-Type", a.ctype)
	h.Set("ETag", a.etag)
	// no-cache: revalidate, so that a new binary's page is seen at once.
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'")
	if r.Header.Get("If-None-Match") == a.etag {
		w.WriteHeader(http.StatusNotModified)
		return true
	}
	h.Set("Content-Length", strconv.Itoa(len(a.body)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(a.body)
	}
	return true
}

func serveIndex(w http.ResponseWriter, r *http.Request) {
	serveAsset(w, r, "index.html")
}

func serveUI(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	if name == "index.html" || !serveAsset(w, r, name) {
		notFound(w, r)
	}
}

func notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, &apiError{Status: http.StatusNotFound, Type: typeInvalid, Code: "not_found",
		Message: fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path)})
}
