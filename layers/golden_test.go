package layers

import (
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// rewriteGolden rewrites testdata/golden from what the code encodes now:
// only for a deliberate change of format, never to make a test pass.
var rewriteGolden = flag.Bool("rewrite-golden", false, "rewrite testdata/golden from the current code")

// The layer map's encoding (carried in MapProposed records and monitor
// snapshots): overlapping stages, a large epoch, a stage id of many
// bytes. Decoding the golden bytes gives the map back.
func TestGoldenLayerMap(t *testing.T) {
	m, err := NewLayerMap(40, 1<<40+7,
		Stage{"12D3KooWHFrmLWTTDD4NodGmp4ttxvexGdXKXR5pejuR8XCbsTJy", Range{0, 16}},
		Stage{"b", Range{14, 30}},
		Stage{"c", Range{28, 40}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", "golden", "layermap.txt")
	line := "layermap " + hex.EncodeToString(b) + "\n"
	if *rewriteGolden {
		if err := os.WriteFile(path, []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if line != string(want) {
		t.Fatalf("encoding differs from %s:\n%s\nwant:\n%s", path, line, want)
	}
	gb, err := hex.DecodeString(strings.TrimPrefix(strings.TrimSpace(string(want)), "layermap "))
	if err != nil {
		t.Fatal(err)
	}
	var got LayerMap
	if err := got.UnmarshalBinary(gb); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("golden bytes decode to %+v, want %+v", got, m)
	}
}
