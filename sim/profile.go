package sim

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
)

// ErrBadData reports a reference data file the simulator cannot use.
var ErrBadData = errors.New("sim: bad data file")

// Table maps a batch size in tokens to one layer's time in seconds, by
// linear interpolation between profiled rows.
type Table struct {
	x []float64
	y []float64 // seconds
}

// At interpolates: left is the largest profiled x ≤ v and right the
// smallest x ≥ v; an exact hit returns the row. Beyond the last row it
// extrapolates from the last two rows (Helix asserts there instead).
func (t Table) At(v float64) float64 {
	n := len(t.x)
	if n == 0 {
		return 0
	}
	if v <= t.x[0] {
		return t.y[0]
	}
	i := sort.SearchFloat64s(t.x, v) // first x ≥ v
	if i < n && t.x[i] == v {
		return t.y[i]
	}
	if i == n {
		if n == 1 {
			return t.y[0]
		}
		i = n - 1
	}
	x0, x1, y0, y1 := t.x[i-1], t.x[i], t.y[i-1], t.y[i]
	return y0 + (y1-y0)*(v-x0)/(x1-x0)
}

// Profile is a machine's profiled layer time for one model: Helix's
// prompt and decode tables.
type Profile struct {
	Prompt, Decode Table
}

// LayerTime is Helix's formula for a mixed batch: prompt time of the
// summed prompt tokens plus decode time of the decode count, with the
// decode time of a single sequence doubled (a quirk of Helix kept so that
// replays match).
func (p Profile) LayerTime(promptTokens, decodeTokens int) float64 {
	t := 0.0
	if promptTokens > 0 {
		t += p.Prompt.At(float64(promptTokens))
	}
	if decodeTokens > 0 {
		d := p.Decode.At(float64(decodeTokens))
		if decodeTokens == 1 {
			d *= 2
		}
		t += d
	}
	return t
}

// readCSV reads a headed CSV into rows keyed by column name.
func readCSV(path string) ([]map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseCSV(f, path)
}

func parseCSV(r io.Reader, name string) ([]map[string]string, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: header: %v", ErrBadData, name, err)
	}
	var rows []map[string]string
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if err == io.EOF {
			return rows, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %s:%d: %v", ErrBadData, name, line, err)
		}
		m := make(map[string]string, len(head))
		for i, h := range head {
			if i < len(rec) {
				m[h] = rec[i]
			}
		}
		rows = append(rows, m)
	}
}

func num(row map[string]string, col, file string) (float64, error) {
	v, err := strconv.ParseFloat(row[col], 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: column %q: %v", ErrBadData, file, col, err)
	}
	return v, nil
}

// readTable loads a profile CSV (batch_tokens, layer_time_ms).
func readTable(path string) (Table, error) {
	rows, err := readCSV(path)
	if err != nil {
		return Table{}, err
	}
	var t Table
	for _, r := range rows {
		x, err := num(r, "batch_tokens", path)
		if err != nil {
			return Table{}, err
		}
		y, err := num(r, "layer_time_ms", path)
		if err != nil {
			return Table{}, err
		}
		if len(t.x) > 0 && x <= t.x[len(t.x)-1] {
			return Table{}, fmt.Errorf("%w: %s: batch_tokens not increasing at %g", ErrBadData, path, x)
		}
		t.x = append(t.x, x)
		t.y = append(t.y, y/1e3)
	}
	if len(t.x) == 0 {
		return Table{}, fmt.Errorf("%w: %s: no rows", ErrBadData, path)
	}
	return t, nil
}

// LoadProfile reads profiles/<model>/<gpu>/{prompt,decode}.csv.
func LoadProfile(dir, model, gpu string) (Profile, error) {
	base := filepath.Join(dir, "profiles", model, gpu)
	p, err := readTable(filepath.Join(base, "prompt.csv"))
	if err != nil {
		return Profile{}, err
	}
	d, err := readTable(filepath.Join(base, "decode.csv"))
	if err != nil {
		return Profile{}, err
	}
	return Profile{Prompt: p, Decode: d}, nil
}

// LoadCaps reads the batch caps for a node holding k layers; beyond the
// last row (force-set pipelines) the last row applies, as in Helix.
func LoadCaps(dir, model, gpu string, k int) (Caps, error) {
	path := filepath.Join(dir, "profiles", model, gpu, "settings.csv")
	rows, err := readCSV(path)
	if err != nil {
		return Caps{}, err
	}
	if len(rows) == 0 {
		return Caps{}, fmt.Errorf("%w: %s: no rows", ErrBadData, path)
	}
	row := rows[len(rows)-1]
	for _, r := range rows {
		if r["num_layers_on_node"] == strconv.Itoa(k) {
			row = r
		}
	}
	var c Caps
	for _, f := range []struct {
		col string
		v   *int
	}{
		{"prompt_max_requests", &c.PromptMaxRequests},
		{"prompt_max_tokens", &c.PromptMaxTokens},
		{"decode_max_tokens", &c.DecodeMaxTokens},
		{"decode_max_context", &c.DecodeMaxContext},
	} {
		x, err := num(row, f.col, path)
		if err != nil {
			return Caps{}, err
		}
		*f.v = int(x)
	}
	return c, nil
}
