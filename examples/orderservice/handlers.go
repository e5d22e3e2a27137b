package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/idempotency"
)

// Headers the API reads or sets.
const (
	HeaderRequestID = "X-Request-Id"
	HeaderReplayed  = "Idempotent-Replayed" // "true" on a replayed response
)

// Error codes of the API: stable, for clients to switch on.
const (
	CodeInvalidJSON       = "invalid_json"
	CodeInvalidQuery      = "invalid_query"          // a malformed or repeated query parameter
	CodeUnsupportedMedia  = "unsupported_media_type" // status 415: the body is not sent as application/json
	CodeBodyTooLarge      = "body_too_large"         // status 413
	CodeInvalidProduct    = "invalid_product"
	CodeInvalidProductID  = "invalid_product_id"
	CodeInvalidCount      = "invalid_count"
	CodeMissingRequestNo  = "missing_request_no"
	CodeInvalidRequestNo  = "invalid_request_no" // longer than maxRequestNoLen, or a control character
	CodeRequestMismatch   = "request_mismatch"   // status 422: requestNo reused for another product or count
	CodeNotFound          = "not_found"
	CodeProductNotFound   = "product_not_found"
	CodeOrderNotFound     = "order_not_found"
	CodeMethodNotAllowed  = "method_not_allowed"
	CodeInsufficientStock = "insufficient_stock"
	CodeInProgress        = "in_progress"
	CodeBusy              = "busy" // status 503: the lock was held by another request past the lock wait
	CodeLockLost          = "lock_lost"
	CodeUnavailable       = "unavailable" // status 503: Redis or the database could not be reached (writeDomainError, handleHealth)
	CodeInternal          = "internal"
	CodeClientClosed      = "client_closed_request" // status 499: the client went away first
)

// maxCount bounds the count of one deduction or order.
const maxCount = 1_000_000

// maxRequestNoLen bounds the length of a requestNo, in bytes.
const maxRequestNoLen = 128

// maxNameLen bounds the length of a product name, in bytes.
const maxNameLen = 200

// maxBodyLen bounds a request body, in bytes (413 beyond).
const maxBodyLen = 64 << 10

// APIError is the body of every error response.
type APIError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Error returns "code: message".
func (e *APIError) Error() string { return e.Code + ": " + e.Message }

func apiError(status int, code, format string, args ...any) *APIError {
	return &APIError{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Handler returns the HTTP API.
func (a *App) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/products", a.handleCreateProduct)
	mux.HandleFunc("GET /api/products/{id}", a.handleGetProduct)
	mux.HandleFunc("POST /api/stock/{id}/deduct", a.handleDeduct)
	mux.HandleFunc("POST /api/orders", a.handleCreateOrder)
	mux.HandleFunc("GET /api/orders/{requestNo}", a.handleGetOrder)
	mux.HandleFunc("GET /healthz", a.handleHealth)
	mux.Handle("GET /metrics", a.metrics)
	return a.middleware(mux)
}

// requestIDKey is the context key of the request id.
type requestIDKey struct{}

// RequestID returns the request id of ctx, set by the middleware.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// middleware gives every request an id (X-Request-Id, from the request if it
// carries a sensible one), answers unknown routes and methods with JSON
// errors, recovers panics, counts the response in the metrics and logs it.
func (a *App) middleware(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := r.Header.Get(HeaderRequestID)
		if !validRequestID(id) {
			id = newRequestID()
		}
		w.Header().Set(HeaderRequestID, id)
		r = r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id))
		sw := &statusWriter{ResponseWriter: w}

		h, route := mux.Handler(r)
		if route == "" {
			// No route: let the mux decide between 404 and 405 (and the
			// Allow header), but answer in JSON.
			route = "unmatched"
			h = jsonMuxError(h)
		}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				a.log.Error("panic", "request_id", id, "panic", fmt.Sprint(p))
				if !sw.wrote {
					writeError(sw, apiError(http.StatusInternalServerError, CodeInternal, "internal error"))
				}
			}
			status := sw.status
			if status == 0 {
				status = http.StatusOK
			}
			a.metrics.ObserveRequest(route, status)
			a.log.Info("http", "request_id", id, "method", r.Method, "route", route, "path", r.URL.Path,
				"status", status, "duration_ms", float64(time.Since(start).Microseconds())/1000)
		}()
		if route == "unmatched" {
			h.ServeHTTP(sw, r)
			return
		}
		mux.ServeHTTP(sw, r) // sets r.PathValue
	})
}

// jsonMuxError runs the mux's own 404 or 405 handler to learn the status and
// headers, and answers with a JSON error instead of its text.
func jsonMuxError(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &headerRecorder{header: http.Header{}}
		h.ServeHTTP(rec, r)
		if allow := rec.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		switch rec.status {
		case http.StatusMethodNotAllowed:
			writeError(w, apiError(rec.status, CodeMethodNotAllowed, "method %s not allowed for %s", r.Method, r.URL.Path))
		case http.StatusNotFound, 0:
			writeError(w, apiError(http.StatusNotFound, CodeNotFound, "no route for %s %s", r.Method, r.URL.Path))
		default: // redirects and the like: pass them on
			for k, v := range rec.header {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.status)
		}
	})
}

// headerRecorder records a status and headers, and discards the body.
type headerRecorder struct {
	header http.Header
	status int
}

func (h *headerRecorder) Header() http.Header { return h.header }
func (h *headerRecorder) Write(b []byte) (int, error) {
	if h.status == 0 {
		h.status = http.StatusOK
	}
	return len(b), nil
}
func (h *headerRecorder) WriteHeader(status int) {
	if h.status == 0 {
		h.status = status
	}
}

// statusWriter remembers the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (s *statusWriter) WriteHeader(status int) {
	if !s.wrote {
		s.status, s.wrote = status, true
	}
	s.ResponseWriter.WriteHeader(status)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if !s.wrote {
		s.status, s.wrote = http.StatusOK, true
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// validRequestID accepts ids of 1 to 128 visible ASCII characters.
func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// newRequestID returns 16 random bytes in hex.
func newRequestID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// handleCreateProduct: POST /api/products {"name": "...", "stock": N} → 201.
func (a *App) handleCreateProduct(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name  string `json:"name"`
		Stock *int64 `json:"stock"`
	}
	if err := decodeJSON(w, r, &body); err != nil {
		writeError(w, err)
		return
	}
	if apiErr := checkText("name", body.Name, maxNameLen, CodeInvalidProduct); apiErr != nil {
		writeError(w, apiErr)
		return
	}
	if body.Stock == nil {
		writeError(w, apiError(http.StatusBadRequest, CodeInvalidProduct, "missing stock: want an integer >= 0"))
		return
	}
	if *body.Stock < 0 {
		writeError(w, apiError(http.StatusBadRequest, CodeInvalidProduct, "invalid stock %d: must not be negative", *body.Stock))
		return
	}
	p, err := a.store.CreateProduct(r.Context(), body.Name, *body.Stock)
	if err != nil {
		a.internalError(w, r, err)
		return
	}
	a.log.Info("product created", "request_id", RequestID(r.Context()), "product_id", p.ID, "stock", p.Stock)
	writeJSON(w, http.StatusCreated, p)
}

// handleGetProduct: GET /api/products/{id} → 200, 400, 404.
func (a *App) handleGetProduct(w http.ResponseWriter, r *http.Request) {
	id, apiErr := productID(r.PathValue("id"))
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	p, err := a.store.Product(r.Context(), id)
	if err != nil {
		a.writeDomainError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

// handleDeduct: POST /api/stock/{id}/deduct?count=N → 200 with the order,
// 400 (bad id or count), 404, 409 insufficient_stock, 503 busy, unavailable
// or lock_lost.
func (a *App) handleDeduct(w http.ResponseWriter, r *http.Request) {
	id, apiErr := productID(r.PathValue("id"))
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	q, apiErr := singleQuery(r)
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	if !q.Has("count") {
		writeError(w, apiError(http.StatusBadRequest, CodeInvalidCount, "missing query parameter count: want an integer from 1 to %d", maxCount))
		return
	}
	count, apiErr := parseCount(q.Get("count"))
	if apiErr != nil {
		writeError(w, apiErr)
		return
	}
	o, err := a.Deduct(r.Context(), Deduction{ProductID: id, Count: count, RequestID: RequestID(r.Context())})
	if err != nil {
		a.writeDomainError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, o)
}

// handleCreateOrder: POST /api/orders {"requestNo", "productId", "count"} →
// 201 with the order (replayed identically for duplicates, with
// Idempotent-Replayed: true), 400, 404, 409 insufficient_stock or
// in_progress, 422 request_mismatch (the requestNo was used for another
// product or count), 503 busy, unavailable or lock_lost.
func (a *App) handleCreateOrder(w http.ResponseWriter, r *http.Request) {
	var req CreateOrderRequest
	if err := decodeJSON(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	if strings.TrimSpace(req.RequestNo) == "" {
		writeError(w, apiError(http.StatusBadRequest, CodeMissingRequestNo, "missing requestNo: the client must send the same non-blank request number with every retry of one order"))
		return
	}
	if apiErr := checkText("requestNo", req.RequestNo, maxRequestNoLen, CodeInvalidRequestNo); apiErr != nil {
		writeError(w, apiErr)
		return
	}
	if req.ProductID <= 0 {
		writeError(w, apiError(http.StatusBadRequest, CodeInvalidProductID, "invalid productId %d: must be a positive integer", req.ProductID))
		return
	}
	if req.Count <= 0 || req.Count > maxCount {
		writeError(w, apiError(http.StatusBadRequest, CodeInvalidCount, "invalid count %d: want an integer from 1 to %d", req.Count, maxCount))
		return
	}
	body, replayed, err := a.CreateOrder(r.Context(), req, RequestID(r.Context()))
	if err != nil {
		a.writeDomainError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if replayed {
		w.Header().Set(HeaderReplayed, "true")
	}
	w.WriteHeader(http.StatusCreated)
	w.Write(body)
}

// handleGetOrder: GET /api/orders/{requestNo} → 200 with the order (the
// body POST /api/orders answered), 400, 404 order_not_found, 409
// in_progress while it is being created.
func (a *App) handleGetOrder(w http.ResponseWriter, r *http.Request) {
	no := r.PathValue("requestNo")
	if apiErr := checkText("requestNo", no, maxRequestNoLen, CodeInvalidRequestNo); apiErr != nil {
		writeError(w, apiErr)
		return
	}
	o, err := a.Order(r.Context(), no)
	if err != nil {
		a.writeDomainError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, o)
}

// handleHealth: GET /healthz → 200 when the database and Redis answer,
// 503 naming which did not. The driver's error, which may name the
// database's host and user, goes to the log only.
func (a *App) handleHealth(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := a.store.Ping(ctx); err != nil {
		a.log.Warn("healthz: database", "request_id", RequestID(r.Context()), "error", a.cfg.Redactor()(err.Error()))
		writeError(w, apiError(http.StatusServiceUnavailable, CodeUnavailable, "the database did not answer"))
		return
	}
	if err := a.rdb.Ping(ctx).Err(); err != nil {
		a.log.Warn("healthz: redis", "request_id", RequestID(r.Context()), "error", a.cfg.Redactor()(err.Error()))
		writeError(w, apiError(http.StatusServiceUnavailable, CodeUnavailable, "redis did not answer"))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "database": a.cfg.Database(), "noLock": a.cfg.NoLock})
}

// productID parses a product id from the path.
func productID(s string) (int64, *APIError) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id <= 0 {
		return 0, apiError(http.StatusBadRequest, CodeInvalidProductID, "invalid product id %q: must be a positive integer", s)
	}
	return id, nil
}

// parseCount parses the count query parameter.
func parseCount(s string) (int64, *APIError) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > maxCount {
		return 0, apiError(http.StatusBadRequest, CodeInvalidCount, "invalid count %q: want an integer from 1 to %d", s, maxCount)
	}
	return n, nil
}

// checkText refuses a text field that is blank, longer than max bytes, or
// holds what the database cannot store or a log line should not carry:
// a NUL byte (PostgreSQL refuses it), another control character, or
// invalid UTF-8. The message names the field and where the problem is.
func checkText(field, s string, max int, code string) *APIError {
	bad := func(format string, args ...any) *APIError {
		return apiError(http.StatusBadRequest, code, "invalid %s: "+format, append([]any{field}, args...)...)
	}
	switch {
	case strings.TrimSpace(s) == "":
		return bad("must not be blank")
	case len(s) > max:
		return bad("%d bytes long, at most %d allowed", len(s), max)
	case !utf8.ValidString(s):
		return bad("not valid UTF-8")
	}
	for i, c := range s {
		if c == 0 {
			return bad("contains a NUL character (U+0000) at byte %d", i)
		}
		if unicode.IsControl(c) {
			return bad("contains a control character (%U) at byte %d", c, i)
		}
	}
	return nil
}

// singleQuery parses the query string, refusing a malformed one and a
// parameter given more than once (which of the values was meant?).
func singleQuery(r *http.Request) (url.Values, *APIError) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, apiError(http.StatusBadRequest, CodeInvalidQuery, "invalid query string: %v", err)
	}
	for _, name := range slices.Sorted(maps.Keys(q)) {
		if len(q[name]) > 1 {
			return nil, apiError(http.StatusBadRequest, CodeInvalidQuery, "query parameter %s given %d times: give it once", name, len(q[name]))
		}
	}
	return q, nil
}

// decodeJSON reads a JSON object body of at most maxBodyLen bytes into v,
// sent as application/json (415 otherwise). Its errors name the JSON field
// and what it should hold, never a Go type.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) *APIError {
	if r.ContentLength == 0 {
		return apiError(http.StatusBadRequest, CodeInvalidJSON, "empty request body: want a JSON object")
	}
	if ct := r.Header.Get("Content-Type"); ct == "" {
		return apiError(http.StatusUnsupportedMediaType, CodeUnsupportedMedia, "missing Content-Type: send the body as application/json")
	} else if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		return apiError(http.StatusUnsupportedMediaType, CodeUnsupportedMedia, "unsupported Content-Type %q: send the body as application/json", ct)
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyLen))
	if err := dec.Decode(v); err != nil {
		var maxErr *http.MaxBytesError
		var typeErr *json.UnmarshalTypeError
		var syntaxErr *json.SyntaxError
		switch {
		case errors.As(err, &maxErr):
			return apiError(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "request body larger than %d bytes", maxErr.Limit)
		case errors.Is(err, io.EOF):
			return apiError(http.StatusBadRequest, CodeInvalidJSON, "empty request body: want a JSON object")
		case errors.As(err, &typeErr) && typeErr.Field == "":
			return apiError(http.StatusBadRequest, CodeInvalidJSON, "invalid JSON body: got %s, want an object", jsonKind(typeErr.Value))
		case errors.As(err, &typeErr):
			return apiError(http.StatusBadRequest, CodeInvalidJSON, "invalid %s: got %s, want %s", typeErr.Field, jsonKind(typeErr.Value), wantKind(typeErr.Type))
		case errors.As(err, &syntaxErr):
			return apiError(http.StatusBadRequest, CodeInvalidJSON, "invalid JSON body at byte %d: %s", syntaxErr.Offset, strings.TrimPrefix(syntaxErr.Error(), "json: "))
		default: // io.ErrUnexpectedEOF and the like
			return apiError(http.StatusBadRequest, CodeInvalidJSON, "invalid JSON body: %s", strings.TrimPrefix(err.Error(), "json: "))
		}
	}
	if dec.More() {
		return apiError(http.StatusBadRequest, CodeInvalidJSON, "invalid JSON body: more than one value")
	}
	return nil
}

// jsonKind names what a json.UnmarshalTypeError's Value describes ("string",
// "number 1e30", "array", ...) for a client.
func jsonKind(value string) string {
	switch kind, literal, _ := strings.Cut(value, " "); kind {
	case "number":
		if literal == "" {
			return "a number"
		}
		return "the " + value
	case "array", "object":
		return "an " + kind
	default:
		return "a " + value
	}
}

// wantKind says what a field of Go type t accepts, in JSON terms.
func wantKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Pointer:
		return wantKind(t.Elem())
	default:
		return "another JSON type"
	}
}

// writeDomainError maps an error of the App or the store to a response.
// The order of the cases matters: an error can match several (fn's error
// joined with a failed release, say), and the first that says what became
// of the request wins.
func (a *App) writeDomainError(w http.ResponseWriter, r *http.Request, err error) {
	var insufficient *InsufficientStockError
	var mismatch *RequestMismatchError
	switch {
	case errors.Is(err, ErrProductNotFound):
		writeError(w, apiError(http.StatusNotFound, CodeProductNotFound, "%v", err))
	case errors.Is(err, ErrOrderNotFound):
		writeError(w, apiError(http.StatusNotFound, CodeOrderNotFound, "%v", err))
	case errors.Is(err, idempotency.ErrInvalidArgument):
		// The handlers check first; this catches what they let through.
		writeError(w, apiError(http.StatusBadRequest, CodeInvalidRequestNo, "%s", strings.TrimPrefix(err.Error(), "idempotency: ")))
	case errors.As(err, &mismatch):
		writeError(w, apiError(http.StatusUnprocessableEntity, CodeRequestMismatch, "%s", mismatch.Error()))
	case errors.As(err, &insufficient):
		writeError(w, apiError(http.StatusConflict, CodeInsufficientStock, "%s", insufficient.Error()))
	case errors.Is(err, idempotency.ErrInProgress), errors.Is(err, idempotency.ErrSuperseded):
		writeError(w, apiError(http.StatusConflict, CodeInProgress, "a request with this requestNo is in progress; retry later to get its result"))
	case errors.Is(err, ErrBusy):
		w.Header().Set("Retry-After", "1")
		writeError(w, apiError(http.StatusServiceUnavailable, CodeBusy, "the product is busy: the lock was not free within %v; retry", a.cfg.LockWait))
	case errors.Is(err, ErrLockLost):
		w.Header().Set("Retry-After", "1")
		writeError(w, apiError(http.StatusServiceUnavailable, CodeLockLost, "the lock was lost before the order was committed; nothing was written; retry"))
	case r.Context().Err() != nil:
		// The client went away (its request context is cancelled); nobody
		// reads this answer, and it is no server error.
		writeError(w, apiError(499, CodeClientClosed, "the client closed the request"))
	case errors.Is(err, fencelock.ErrUnavailable):
		// Redis could not be reached (for the product lock or the
		// idempotency guard's request lock): not "busy", since whether
		// anyone holds the lock is unknown.
		w.Header().Set("Retry-After", "1")
		writeError(w, apiError(http.StatusServiceUnavailable, CodeUnavailable, "the lock service could not be reached; retry"))
	case errors.Is(err, idempotency.ErrUnavailable):
		// The guard could not reach the database holding the
		// idempotency records.
		w.Header().Set("Retry-After", "1")
		writeError(w, apiError(http.StatusServiceUnavailable, CodeUnavailable, "the database could not be reached; retry"))
	default:
		a.internalError(w, r, err)
	}
}

// internalError logs err and answers 500 without details.
func (a *App) internalError(w http.ResponseWriter, r *http.Request, err error) {
	a.log.Error("internal error", "request_id", RequestID(r.Context()), "error", a.cfg.Redactor()(err.Error()))
	writeError(w, apiError(http.StatusInternalServerError, CodeInternal, "internal error (request id %s)", RequestID(r.Context())))
}

// writeError writes an *APIError as JSON.
func writeError(w http.ResponseWriter, e *APIError) {
	writeJSON(w, e.Status, e)
}

// writeJSON writes v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if err := json.NewEncoder(w).Encode(v); err != nil {
		slog.Debug("writing response", "error", err)
	}
}
