package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/stratanet/strata/node"
	"github.com/stratanet/strata/routing"
)

// Sentinel errors of the package. Server-side errors wrap them; the HTTP
// statuses are in the package doc.
var (
	// ErrInvalidRequest: the request does not decode or a field is out of
	// range.
	ErrInvalidRequest = errors.New("api: invalid request")
	// ErrTooLarge: the request body is over the server's cap.
	ErrTooLarge = errors.New("api: request body too large")
	// ErrUnauthorized: an API key is set and the request does not carry it.
	ErrUnauthorized = errors.New("api: unauthorized")
	// ErrDraining: the server refuses new generations because its node is
	// leaving.
	ErrDraining = errors.New("api: draining")
	// ErrServerClosed: the server was shut down.
	ErrServerClosed = errors.New("api: server closed")
)

// OpenAI error types.
const (
	typeInvalid = "invalid_request_error"
	typeServer  = "server_error"
)

// apiError is one error response: the status, OpenAI's error object and,
// for a 503, how long the client should wait.
type apiError struct {
	Status     int
	Message    string
	Type       string
	Param      string // "" is null
	Code       string // "" is null
	RetryAfter time.Duration
	err        error // what it came from, for logs
}

func (e *apiError) Error() string { return e.Message }
func (e *apiError) Unwrap() error { return e.err }

// errorBody is OpenAI's error JSON.
type errorBody struct {
	Error errorObject `json:"error"`
}

type errorObject struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) body() errorBody {
	o := errorObject{Message: e.Message, Type: e.Type}
	if e.Param != "" {
		o.Param = &e.Param
	}
	if e.Code != "" {
		o.Code = &e.Code
	}
	return errorBody{Error: o}
}

func invalid(param, format string, args ...any) *apiError {
	msg := fmt.Sprintf(format, args...)
	return &apiError{Status: http.StatusBadRequest, Message: msg, Type: typeInvalid, Param: param, Code: "invalid_request",
		err: fmt.Errorf("%w: %s", ErrInvalidRequest, msg)}
}

// prefixes are the package prefixes of sentinel errors that mean nothing
// to an API user, at the start of the text or of a wrapped part.
var prefixes = regexp.MustCompile(`(^|: )(?:node|api): `)

// message is an error's text without those prefixes ("a node: ..." in
// the middle of a sentence stays).
func message(err error) string {
	return prefixes.ReplaceAllString(err.Error(), "$1")
}

// fromError maps an error of the node (or of the server) to a response,
// with errors.Is on the sentinels. param names the request field a
// context overflow is blamed on ("prompt" or "messages").
func fromError(err error, param string) *apiError {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	e := &apiError{Message: message(err), err: err}
	switch {
	case errors.Is(err, ErrDraining):
		e.Status, e.Type, e.Code = http.StatusServiceUnavailable, typeServer, "draining"
		e.RetryAfter = time.Second
	case errors.Is(err, ErrServerClosed), errors.Is(err, node.ErrClosed):
		e.Status, e.Type, e.Code = http.StatusServiceUnavailable, typeServer, "shutting_down"
		e.RetryAfter = time.Second
	// An unknown profile is a bad request too: its own code goes first.
	case errors.Is(err, routing.ErrUnknownProfile):
		e.Status, e.Type, e.Param, e.Code = http.StatusBadRequest, typeInvalid, "profile", "unknown_profile"
	case errors.Is(err, node.ErrBadRequest):
		e.Status, e.Type, e.Code = http.StatusBadRequest, typeInvalid, "invalid_request"
	case errors.Is(err, node.ErrUnknownModel):
		e.Status, e.Type, e.Param, e.Code = http.StatusNotFound, typeInvalid, "model", "model_not_found"
	case errors.Is(err, node.ErrPromptTooLong):
		e.Status, e.Type, e.Param, e.Code = http.StatusRequestEntityTooLarge, typeInvalid, param, "context_length_exceeded"
	// A lost session wraps ErrNoCapacity too when no path was found: the
	// more specific code goes first.
	case errors.Is(err, node.ErrSessionLost):
		e.Status, e.Type, e.Code = http.StatusServiceUnavailable, typeServer, "session_lost"
		e.RetryAfter = max(node.RetryAfter(err), time.Second)
	// No path can exist until more nodes join: its own code, so that a
	// client tells it from a busy swarm.
	case errors.Is(err, node.ErrUncovered):
		e.Status, e.Type, e.Code = http.StatusServiceUnavailable, typeServer, "layers_uncovered"
		e.RetryAfter = max(node.RetryAfter(err), time.Second)
	case errors.Is(err, node.ErrNoCapacity):
		e.Status, e.Type, e.Code = http.StatusServiceUnavailable, typeServer, "no_capacity"
		e.RetryAfter = max(node.RetryAfter(err), time.Second)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The client went away; nobody reads this, but metrics count it
		// apart from server errors (nginx's 499).
		e.Status, e.Type, e.Code = statusClientClosed, typeInvalid, "client_closed_request"
	default:
		e.Status, e.Type, e.Code = http.StatusInternalServerError, typeServer, "internal_error"
	}
	return e
}

// statusClientClosed is nginx's status for a client that went away
// before the response: never sent, only counted.
const statusClientClosed = 499

// retryAfterHeader is a Retry-After value in whole seconds, rounded up.
func retryAfterHeader(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}

// errorWriter is how an endpoint's errors are written: Anthropic's
// shape for /v1/messages, OpenAI's for the rest.
func errorWriter(endpoint string) func(http.ResponseWriter, *apiError) {
	if endpoint == endpointMessages || endpoint == endpointCountTokens {
		return writeAnthropicError
	}
	return writeError
}

// writeError sends e as the whole response, in OpenAI's shape.
func writeError(w http.ResponseWriter, e *apiError) {
	writeErrorBody(w, e, e.body())
}

// writeErrorBody sends e's status and headers with body as the JSON.
func writeErrorBody(w http.ResponseWriter, e *apiError, body any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", retryAfterHeader(e.RetryAfter))
	}
	if e.Status == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `Bearer realm="strata"`)
	}
	if e.Status == statusClientClosed {
		// The client is gone: nothing to write, but metrics count it.
		if r, ok := w.(*recorder); ok {
			r.status = statusClientClosed
		}
		return
	}
	w.WriteHeader(e.Status)
	b, _ := json.Marshal(body)
	_, _ = w.Write(append(b, '\n'))
}
