package weights

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"math"
	"testing"

	"github.com/stratanet/strata/internal/goldentest"
	"github.com/stratanet/strata/swarm/chunks"
)

// The manifest and info answers of the node control protocol
// (info.go): a small manifest in one answer, a paged manifest's two
// pages, and the info answer of a node that holds the file. A page is a
// mebibyte: the file keeps its first 64 bytes and the SHA-256 of all of
// it. The requests come from encodeManifestRequest, askManifest's encoder
// (TestManifestRequestWire checks that a real askManifest sends these
// bytes), and decode back; the answers come from answerManifest and
// answerInfo.
func TestGoldenManifestPages(t *testing.T) {
	const fp = "sha256:golden-pages"
	big := bigChunkManifest(t, fp, manifestPage/sha256.Size+16)
	if len(big) <= manifestPage || len(big) > 2*manifestPage {
		t.Fatalf("test manifest of %d bytes: want one of two pages", len(big))
	}
	w := &Server{manifest: big, fp: fp, swarm: noSwarm{}, chunks: new(chunks.Server)}

	firstReq := encodeManifestRequest(fp, false, 0)
	page0Req := encodeManifestRequest(fp, true, 0)
	page1Req := encodeManifestRequest(fp, true, manifestPage)
	page0, err := w.AnswerManifest(firstReq)
	if err != nil {
		t.Fatal(err)
	}
	page1, err := w.AnswerManifest(page1Req)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := w.AnswerManifest(page0Req); err != nil || !bytes.Equal(again, page0) {
		t.Fatalf("page 0 by page request differs from the first answer (%v)", err)
	}
	info := w.AnswerInfo()
	w.manifest = []byte("a small manifest")
	small, err := w.AnswerManifest(firstReq)
	if err != nil {
		t.Fatal(err)
	}

	sum := func(b []byte) []byte { h := sha256.Sum256(b); return h[:] }
	lines := goldentest.Lines(t, "manifest_pages.txt", []goldentest.Line{
		{Name: "manifest-request", Bytes: firstReq},
		{Name: "page-request-1", Bytes: page1Req},
		{Name: "answer-small", Bytes: small},
		{Name: "answer-page-0-head", Bytes: page0[:64]},
		{Name: "answer-page-0-sha256", Bytes: sum(page0)},
		{Name: "answer-page-1-head", Bytes: page1[:64]},
		{Name: "answer-page-1-sha256", Bytes: sum(page1)},
		{Name: "manifest-sha256", Bytes: sum(big)},
		{Name: "info-request", Bytes: []byte(infoReqMagic)},
		{Name: "info", Bytes: info},
	})

	// The golden requests decode to what they were encoded from.
	g := map[string][]byte{}
	for _, l := range lines {
		g[l.Name] = l.Bytes
	}
	for name, want := range map[string]struct {
		page bool
		off  uint64
	}{"manifest-request": {false, 0}, "page-request-1": {true, manifestPage}} {
		gotFP, page, off, err := decodeManifestRequest(g[name])
		if err != nil || gotFP != fp || page != want.page || off != want.off {
			t.Fatalf("%s: decoded %q, page %v at %d, %v; want %q, %v at %d", name, gotFP, page, off, err, fp, want.page, want.off)
		}
	}

	// The pages decode (manifestPageOf, askManifest's reader) to the
	// whole manifest, and it is the chunk manifest it was.
	var whole []byte
	for i, p := range [][]byte{page0, page1} {
		total, data, err := manifestPageOf(p)
		if err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
		if p[0]&holdsFile == 0 || total != uint64(len(big)) {
			t.Fatalf("page %d: flags %x, total %d, want holds-file and %d", i, p[0], total, len(big))
		}
		whole = append(whole, data...)
	}
	if !bytes.Equal(whole, big) {
		t.Fatalf("pages join to %d bytes, not the %d-byte manifest", len(whole), len(big))
	}
	if m, err := decodeManifest(whole, fp); err != nil || m.NumChunks() != manifestPage/sha256.Size+16 {
		t.Fatalf("joined pages: %v", err)
	}
	if small[0] != holdsFile || string(small[1:]) != "a small manifest" {
		t.Fatalf("small answer %q", small)
	}
	// The info answer by its layout: flags, rate (f64 bits, big-endian),
	// the manifest's SHA-256.
	if !IsInfoRequest([]byte(infoReqMagic)) || !IsManifestRequest(page1Req) {
		t.Fatal("golden requests not recognised")
	}
	if info[0] != holdsFile || math.Float64frombits(binary.BigEndian.Uint64(info[1:9])) != 0 || !bytes.Equal(info[9:], sum(big)) {
		t.Fatalf("info answer %x", info)
	}
}
