package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// Defaults.
const (
	// DefaultMaxBodyBytes caps a request body: a long chat history fits
	// (a 128k-token context is about 512 KB of text), a runaway client
	// does not.
	DefaultMaxBodyBytes = 4 << 20
	// DefaultKeepAlive is how often a quiet stream (a replay waiting for a
	// repair) gets an SSE comment, so that proxies do not cut it.
	DefaultKeepAlive = 15 * time.Second
	// DefaultLeaderPoll is how often the server reads the leader for the
	// leader-change counter.
	DefaultLeaderPoll = 250 * time.Millisecond
	// DefaultAbortGrace is how long a forced shutdown waits for streams to
	// write their error events before it closes their connections.
	DefaultAbortGrace = time.Second
)

type options struct {
	log          *zap.Logger
	key          apiKey // nil: no key
	maxBody      int64
	keepAlive    time.Duration
	leaderPoll   time.Duration
	abortGrace   time.Duration
	readTimeout  time.Duration
	idleTimeout  time.Duration
	readHdrTmout time.Duration
	maxConns     int
	maxConnsIP   int
}

// Option configures New.
type Option func(*options) error

// WithLogger logs through l (default: nothing).
func WithLogger(l *zap.Logger) Option {
	return func(o *options) error {
		if l != nil {
			o.log = l
		}
		return nil
	}
}

// WithAPIKey requires "Authorization: Bearer key" (or "x-api-key: key",
// as Anthropic's clients send it) on every endpoint but /healthz and the
// dashboard's page. An empty key means none.
func WithAPIKey(key string) Option {
	return func(o *options) error {
		if key == "" {
			o.key = nil
			return nil
		}
		// Compared as digests, so that the comparison's time does not
		// depend on where a guess first differs, nor on its length.
		sum := sha256.Sum256([]byte(key))
		o.key = sum[:]
		return nil
	}
}

// WithAPIKeyFile reads the API key from a file (surrounding white space
// trimmed): a key on the command line would show in process listings.
func WithAPIKeyFile(path string) Option {
	return func(o *options) error {
		key, err := ReadKeyFile(path)
		if err != nil {
			return err
		}
		return WithAPIKey(key)(o)
	}
}

// ReadKeyFile reads an API key file: its content, trimmed, must not be
// empty.
func ReadKeyFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("api key file: %w", err)
	}
	key := strings.TrimSpace(string(b))
	if key == "" {
		return "", fmt.Errorf("api key file %s is empty", path)
	}
	if strings.ContainsAny(key, "\r\n\t ") {
		return "", fmt.Errorf("api key file %s: the key has white space inside", path)
	}
	return key, nil
}

// WithMaxBodyBytes caps request bodies (default DefaultMaxBodyBytes);
// larger ones get 413.
func WithMaxBodyBytes(n int64) Option {
	return func(o *options) error {
		if n <= 0 {
			return fmt.Errorf("api: max body %d: must be positive", n)
		}
		o.maxBody = n
		return nil
	}
}

// WithKeepAlive sets the SSE keep-alive interval (default
// DefaultKeepAlive).
func WithKeepAlive(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("api: keep-alive %v: must be positive", d)
		}
		o.keepAlive = d
		return nil
	}
}

// WithLeaderPoll sets how often the leader is read for the
// leader-change counter (default DefaultLeaderPoll).
func WithLeaderPoll(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("api: leader poll %v: must be positive", d)
		}
		o.leaderPoll = d
		return nil
	}
}

// WithAbortGrace sets how long a forced shutdown lets streams write their
// error events (default DefaultAbortGrace).
func WithAbortGrace(d time.Duration) Option {
	return func(o *options) error { o.abortGrace = max(d, 0); return nil }
}

// WithReadHeaderTimeout closes a connection whose request headers do not
// arrive within d (default 10 s): a slowloris client, or one that connects
// and sends nothing, holds a connection no longer than that.
func WithReadHeaderTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("api: read header timeout %v: must be positive", d)
		}
		o.readHdrTmout = d
		return nil
	}
}

// WithConnectionLimits caps the connections the server holds open: max
// in all and perIP from one address (defaults DefaultMaxConns and
// DefaultMaxConnsPerIP). One over either is closed as soon as it is
// accepted, so that memory stays bounded however many connections a
// client opens, and one client cannot take every slot.
func WithConnectionLimits(max, perIP int) Option {
	return func(o *options) error {
		if max <= 0 || perIP <= 0 {
			return fmt.Errorf("api: connection limits %d, %d per address: must be positive", max, perIP)
		}
		o.maxConns, o.maxConnsIP = max, perIP
		return nil
	}
}

// Server serves the API of one node.
type Server struct {
	b       Backend
	o       options
	log     *zap.Logger
	m       *metrics
	handler http.Handler

	// ctx is the parent of every generation's context: Close and a forced
	// Shutdown cancel it, so that streams end with an error event.
	ctx    context.Context
	cancel context.CancelFunc
	bg     sync.WaitGroup

	mu       sync.Mutex
	srv      []*http.Server
	draining bool
	closed   bool
	active   int
	idle     chan struct{} // closed when active drops to 0
	handlers sync.WaitGroup

	// The handlers, by responsibility (generation stays on Server).
	views views
	dash  *dashboard
	admin admin

	// quit closes when the server stops, so that the dashboard's event
	// streams, which never end on their own, do not hold a graceful
	// shutdown to its deadline.
	quit     chan struct{}
	quitOnce sync.Once
}

// New builds the server of backend b. It starts no listener (see Start
// and Serve) but a poller for the leader-change counter and the
// dashboard's swarm watcher, which Close or Shutdown stop.
func New(b Backend, opts ...Option) (*Server, error) {
	if b == nil {
		return nil, errors.New("api: no backend")
	}
	o := options{log: zap.NewNop(), maxBody: DefaultMaxBodyBytes, keepAlive: DefaultKeepAlive,
		leaderPoll: DefaultLeaderPoll, abortGrace: DefaultAbortGrace,
		readTimeout: time.Minute, idleTimeout: 2 * time.Minute, readHdrTmout: 10 * time.Second,
		maxConns: DefaultMaxConns, maxConnsIP: DefaultMaxConnsPerIP}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	s := &Server{b: b, o: o, log: o.log, m: newMetrics(b), idle: make(chan struct{}), quit: make(chan struct{})}
	s.views = views{b: b, started: time.Now()}
	s.dash = &dashboard{views: s.views, hub: newHub(), quit: s.quit, keepAlive: o.keepAlive}
	s.admin = admin{b: b, maxBody: o.maxBody}
	close(s.idle)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.handler = s.routes()
	s.bg.Add(1)
	go func() { defer s.bg.Done(); s.m.leader.run(s.ctx, b, o.leaderPoll) }()
	s.bg.Add(1)
	go func() { defer s.bg.Done(); s.dash.watch(s.ctx) }()
	return s, nil
}

// Handler is the server's HTTP handler, for tests or another mux.
func (s *Server) Handler() http.Handler { return s.handler }

// Registry is the server's Prometheus registry: the node may register
// collectors of its own beside the server's.
func (s *Server) Registry() *prometheus.Registry { return s.m.reg }

// Start listens on addr (host:port; port 0 picks one) and serves in the
// background. It returns the address it listens on. Errors of the
// listener after start are logged.
func (s *Server) Start(addr string) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("api: listen %s: %w", addr, err)
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		if err := s.Serve(ln); err != nil {
			s.log.Error("api server stopped", zap.Error(err))
		}
	}()
	return ln.Addr(), nil
}

// Serve serves on ln until Shutdown or Close; it returns nil then.
func (s *Server) Serve(ln net.Listener) error {
	hs := &http.Server{Handler: s.handler, ReadHeaderTimeout: s.o.readHdrTmout, ReadTimeout: s.o.readTimeout,
		IdleTimeout: s.o.idleTimeout, MaxHeaderBytes: 64 << 10,
		ErrorLog: zap.NewStdLog(s.log.Named("http"))}
	// No WriteTimeout: a stream lasts as long as its generation.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.srv = append(s.srv, hs)
	s.mu.Unlock()
	s.log.Info("api listening", zap.Stringer("addr", ln.Addr()))
	if err := hs.Serve(newLimitListener(ln, s.o.maxConns, s.o.maxConnsIP, s.m.connsRefused)); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Drain refuses new generations (503, code "draining", with
// Retry-After) and turns /healthz to 503, so that clients and load
// balancers move to other nodes; running generations carry on. The
// swarm view, models and metrics keep answering. Drain is the first
// step of a node's drain; see WaitIdle.
func (s *Server) Drain() {
	s.mu.Lock()
	s.draining = true
	s.mu.Unlock()
	s.log.Info("api draining: new generations refused", zap.Int("running", s.InFlight()))
}

// Draining reports whether Drain was called.
func (s *Server) Draining() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.draining
}

// InFlight is the number of API generations running.
func (s *Server) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active
}

// WaitIdle waits until no API generation runs, or ctx ends. After Drain
// none start, so it returns once the running ones finish.
func (s *Server) WaitIdle(ctx context.Context) error {
	s.mu.Lock()
	ch := s.idle
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// begin admits one generation.
func (s *Server) begin() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrServerClosed
	case s.draining:
		return fmt.Errorf("%w: this node is leaving the swarm; use another node", ErrDraining)
	}
	if s.active == 0 {
		s.idle = make(chan struct{})
	}
	s.active++
	s.m.inFlight.Inc()
	return nil
}

func (s *Server) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active--
	s.m.inFlight.Dec()
	if s.active == 0 {
		close(s.idle)
	}
}

// Shutdown stops the server gracefully: listeners close at once, and
// running requests, streams included, may finish until ctx ends. Then
// running generations are cancelled, their streams get an error event
// (code "shutting_down") within the abort grace, and every connection
// is closed. It returns ctx's error when it had to cut requests.
func (s *Server) Shutdown(ctx context.Context) error {
	servers := s.markClosed()
	var wg sync.WaitGroup
	errs := make([]error, len(servers))
	for i, hs := range servers {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = hs.Shutdown(ctx) }()
	}
	wg.Wait()
	err := errors.Join(errs...)
	if err != nil {
		s.abort(servers)
	}
	s.cancel()
	s.bg.Wait()
	return err
}

// Close stops the server at once: running generations are cancelled,
// their streams get an error event within the abort grace, and every
// connection is closed.
func (s *Server) Close() error {
	servers := s.markClosed()
	s.abort(servers)
	s.bg.Wait()
	return nil
}

func (s *Server) markClosed() []*http.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.quitOnce.Do(func() { close(s.quit) })
	return append([]*http.Server(nil), s.srv...)
}

// abort cancels the generations, lets their handlers write an error
// event for a moment, and closes the connections.
func (s *Server) abort(servers []*http.Server) {
	s.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), s.o.abortGrace)
	done := make(chan struct{})
	go func() { s.handlers.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	cancel()
	for _, hs := range servers {
		hs.Close()
	}
}

// routes builds the mux. Every route checks its methods itself so that
// a wrong method gets OpenAI's error JSON rather than the mux's text.
func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern, endpoint string, auth bool, h http.HandlerFunc, methods ...string) {
		mux.Handle(pattern, s.wrap(endpoint, auth, methods, h))
	}
	handle("/v1/models", "models", true, s.views.handleModels, http.MethodGet)
	handle("/v1/models/{id...}", "model", true, s.views.handleModel, http.MethodGet)
	handle("/v1/completions", "completions", true, s.generate("completions", decodeCompletion), http.MethodPost)
	handle("/v1/chat/completions", "chat_completions", true, s.generate("chat_completions", decodeChat), http.MethodPost)
	handle("/v1/responses", endpointResponses, true, s.generate(endpointResponses, decodeResponses), http.MethodPost)
	handle("/v1/messages", endpointMessages, true, s.generate(endpointMessages, decodeMessages), http.MethodPost)
	handle("/v1/messages/count_tokens", endpointCountTokens, true, s.handleCountTokens, http.MethodPost)
	handle("/v1/swarm", "swarm", true, s.views.handleSwarm, http.MethodGet)
	handle("/v1/swarm/events", "swarm_events", true, s.dash.handleEvents, http.MethodGet)
	handle("/v1/swarm/activity", "swarm_activity", true, s.dash.handleActivity, http.MethodGet)
	handle("/v1/swarm/scheduler", "swarm_scheduler", true, s.views.handleScheduler, http.MethodGet)
	handle("/v1/swarm/verify", "swarm_verify", true, s.admin.handleVerify, http.MethodGet)
	handle("/v1/swarm/config", "swarm_config", true, s.admin.handleSwarmConfig, http.MethodPost)
	// The dashboard's page and assets need no key: they hold no data, and
	// the page asks for the key before it reads any.
	handle("/{$}", "dashboard", false, serveIndex, http.MethodGet)
	handle("/ui/{file...}", "dashboard", false, serveUI, http.MethodGet)
	handle("/metrics", "metrics", true, promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}).ServeHTTP, http.MethodGet)
	handle("/healthz", "healthz", false, s.handleHealth, http.MethodGet)
	handle("/", "other", true, notFound)
	return mux
}

// recorder keeps the status a handler wrote, for the request counter.
type recorder struct {
	http.ResponseWriter
	status int
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// wrap adds what every endpoint shares: panic containment (one bad
// request must not take the node down), the method check, the API key,
// and the request counter. Its errors take the endpoint's shape.
func (s *Server) wrap(endpoint string, auth bool, methods []string, h http.HandlerFunc) http.Handler {
	writeErr := errorWriter(endpoint)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.handlers.Add(1)
		defer s.handlers.Done()
		rec := &recorder{ResponseWriter: w}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("api handler panic", zap.String("endpoint", endpoint), zap.Any("panic", p), zap.Stack("stack"))
				if rec.status == 0 {
					writeErr(rec, &apiError{Status: http.StatusInternalServerError, Type: typeServer, Code: "internal_error",
						Message: "internal error"})
				}
			}
			if rec.status == 0 {
				rec.status = http.StatusOK
			}
			s.m.request(endpoint, rec.status)
		}()
		if len(methods) > 0 && !allowed(r.Method, methods) {
			rec.Header().Set("Allow", strings.Join(methods, ", "))
			writeErr(rec, &apiError{Status: http.StatusMethodNotAllowed, Type: typeInvalid, Code: "method_not_allowed",
				Message: fmt.Sprintf("%s %s: use %s", r.Method, r.URL.Path, strings.Join(methods, " or "))})
			return
		}
		if auth && s.o.key != nil && !s.o.key.allows(r) && (endpoint != "swarm_events" || !s.o.key.allowsQuery(r)) {
			writeErr(rec, &apiError{Status: http.StatusUnauthorized, Type: typeInvalid, Code: "invalid_api_key",
				Message: "missing or wrong API key: send Authorization: Bearer <key> (or x-api-key: <key>)", err: ErrUnauthorized})
			return
		}
		h(rec, r)
	})
}

func allowed(m string, methods []string) bool {
	for _, x := range methods {
		if m == x || (m == http.MethodHead && x == http.MethodGet) {
			return true
		}
	}
	return false
}

// apiKey is the sha256 of the API key: keys are compared as digests,
// so that the comparison's time does not depend on where a guess first
// differs, nor on its length.
type apiKey []byte

// allows compares the bearer token, or the x-api-key header that
// Anthropic's clients send, with the key in constant time.
func (k apiKey) allows(r *http.Request) bool {
	if x := r.Header.Get("X-Api-Key"); x != "" && k.is(x) {
		return true
	}
	h := r.Header.Get("Authorization")
	const prefix = "bearer "
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return false
	}
	return k.is(h[len(prefix):])
}

// is compares a presented key with k as digests.
func (k apiKey) is(key string) bool {
	sum := sha256.Sum256([]byte(strings.TrimSpace(key)))
	return subtle.ConstantTimeCompare(sum[:], k) == 1
}
