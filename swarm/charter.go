package swarm

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"go.uber.org/zap"

	"github.com/stratanet/strata/internal/codec"
	"github.com/stratanet/strata/internal/proto"
)

// A public swarm's identity is its founder's key (issue 36). Its name and
// model are public, so anyone can provide records under the same
// rendezvous and found a rival swarm; what a rival cannot make is the
// founder's signature. The founder signs a charter (the swarm's name, the
// model's fingerprint and its own peer ID) when it founds the swarm;
// every member serves it on /strata/charter/1, and a joiner by name
// checks it on each member it found before it joins, so that it groups
// the members by founder from signatures, not from what they say. A
// joiner can pin the founder (WithPinnedFounder), and a node with a data
// dir remembers the founder it first joined (trust on first use) and
// refuses another later.

// ProtocolCharter is the charter protocol's ID.
const ProtocolCharter = proto.Charter

// charterDomain separates charter signatures from anything else a host
// key signs.
const charterDomain = "strata/swarm-charter/1\x00"

// charterVersion is the version byte of an encoded charter.
const charterVersion = 1

// MaxCharterSize bounds an encoded charter: two labels, a peer ID and a
// signature (RSA ones are the longest, about 512 bytes).
const MaxCharterSize = 4 << 10

// pinFile is the data dir file that records, per public swarm, the
// founder this node first joined.
const pinFile = "public-swarms.json"

// charterTimeout bounds one charter request.
const charterTimeout = 10 * time.Second

// Sentinel errors of swarm identity.
var (
	// ErrBadCharter: a charter that does not decode, is for another swarm
	// or model, or whose signature is not its founder's.
	ErrBadCharter = errors.New("swarm: bad swarm charter")
	// ErrRivalFounders: members of more than one founder answer under one
	// public swarm's name and model, and the node has no founder pinned.
	ErrRivalFounders = errors.New("swarm: rival swarms under one name")
	// ErrFounderMismatch: the only members found were founded by another
	// key than the one this node is pinned to.
	ErrFounderMismatch = errors.New("swarm: swarm founded by another key than pinned")
)

// Charter is a public swarm's founding statement, signed by its founder.
type Charter struct {
	Swarm       string
	Fingerprint string
	Founder     peer.ID
	Sig         []byte
}

func (c *Charter) signedBytes() []byte {
	b := []byte(charterDomain)
	for _, s := range []string{c.Swarm, c.Fingerprint, string(c.Founder)} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

// NewCharter signs the charter of the public swarm name serving the model
// with fingerprint fp, founded by key's owner.
func NewCharter(name, fp string, key crypto.PrivKey) (*Charter, error) {
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadCharter, err)
	}
	c := &Charter{Swarm: name, Fingerprint: fp, Founder: id}
	if c.Sig, err = key.Sign(c.signedBytes()); err != nil {
		return nil, fmt.Errorf("%w: sign: %w", ErrBadCharter, err)
	}
	return c, nil
}

// Verify checks that c is the charter of swarm name with model
// fingerprint fp, signed by the key its founder's peer ID names.
func (c *Charter) Verify(name, fp string) error {
	switch {
	case c.Swarm != name:
		return fmt.Errorf("%w: for swarm %q, not %q", ErrBadCharter, c.Swarm, name)
	case c.Fingerprint != fp:
		return fmt.Errorf("%w: for model %.16s, not %.16s", ErrBadCharter, c.Fingerprint, fp)
	}
	pub, err := c.Founder.ExtractPublicKey()
	if err != nil {
		return fmt.Errorf("%w: founder %s carries no public key: %w", ErrBadCharter, c.Founder, err)
	}
	if ok, err := pub.Verify(c.signedBytes(), c.Sig); err != nil || !ok {
		return fmt.Errorf("%w: signature is not founder %s's", ErrBadCharter, c.Founder)
	}
	return nil
}

// MarshalBinary encodes c: u8 version (1); u8 len, swarm name; u8 len,
// fingerprint; u8 len, founder ID; u16 len, signature (big-endian).
func (c *Charter) MarshalBinary() ([]byte, error) {
	id := []byte(c.Founder)
	switch {
	case len(c.Swarm) > MaxSnapshotLabel || len(c.Fingerprint) > MaxSnapshotLabel:
		return nil, fmt.Errorf("%w: label over %d bytes", ErrBadCharter, MaxSnapshotLabel)
	case len(id) == 0 || len(id) > maxIDLen:
		return nil, fmt.Errorf("%w: founder ID of %d bytes", ErrBadCharter, len(id))
	case len(c.Sig) == 0 || len(c.Sig) > MaxCharterSize/2:
		return nil, fmt.Errorf("%w: signature of %d bytes", ErrBadCharter, len(c.Sig))
	}
	b := []byte{charterVersion}
	for _, s := range [][]byte{[]byte(c.Swarm), []byte(c.Fingerprint), id} {
		b = append(b, byte(len(s)))
		b = append(b, s...)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(c.Sig)))
	return append(b, c.Sig...), nil
}

// DecodeCharter decodes an encoded charter. It checks the encoding only;
// Verify checks the signature.
func DecodeCharter(data []byte) (*Charter, error) {
	if len(data) > MaxCharterSize {
		return nil, fmt.Errorf("%w: %d bytes (max %d)", ErrBadCharter, len(data), MaxCharterSize)
	}
	d := codec.NewReader(data, binary.BigEndian, ErrBadCharter)
	if v := d.U8("version"); d.Err() == nil && v != charterVersion {
		return nil, fmt.Errorf("%w: version %d (want %d)", ErrBadCharter, v, charterVersion)
	}
	c := &Charter{}
	for _, f := range []*string{&c.Swarm, &c.Fingerprint} {
		l := d.Take(int(d.U8("label length")), "label")
		if d.Err() == nil && (len(l) > MaxSnapshotLabel || !utf8.Valid(l)) {
			d.Fail("label %q", l)
		}
		*f = string(l)
	}
	c.Founder = d.PeerID("founder", maxIDLen, false)
	sig := d.Take(int(d.U16("signature length")), "signature")
	d.End()
	if d.Err() != nil {
		return nil, d.Err()
	}
	if len(sig) == 0 {
		return nil, fmt.Errorf("%w: no signature", ErrBadCharter)
	}
	c.Sig = slices.Clone(sig)
	return c, nil
}

// Charter answers: a status byte, then the encoded charter.
const (
	charterOK   = 0
	charterNone = 1 // the node holds no charter (yet)
)

// serveCharter answers a charter request with the host's charter.
func (d *publicDisc) serveCharter(st network.Stream) {
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(charterTimeout))
	resp := []byte{charterNone}
	if c := d.charter.Load(); c != nil {
		if b, err := c.MarshalBinary(); err == nil {
			resp = append([]byte{charterOK}, b...)
		}
	}
	if err := WriteFrame(st, resp, MaxCharterSize+1); err != nil {
		st.Reset()
	}
}

// FetchCharter asks p over h for the charter of the public swarm it is a
// member of, and verifies it for swarm name and model fingerprint fp.
func FetchCharter(ctx context.Context, h host.Host, p peer.ID, name, fp string) (*Charter, error) {
	ctx, cancel := context.WithTimeout(ctx, charterTimeout)
	defer cancel()
	st, err := h.NewStream(network.WithAllowLimitedConn(ctx, "charter"), p, ProtocolCharter)
	if err != nil {
		return nil, fmt.Errorf("charter stream to %s: %w", p, err)
	}
	defer st.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = st.SetDeadline(dl)
	}
	_ = st.CloseWrite()
	resp, err := ReadFrame(st, MaxCharterSize+1)
	if err != nil {
		st.Reset()
		return nil, fmt.Errorf("charter from %s: %w", p, err)
	}
	switch {
	case len(resp) == 1 && resp[0] == charterNone:
		return nil, fmt.Errorf("%w: %s holds no charter", ErrBadCharter, p)
	case len(resp) < 2 || resp[0] != charterOK:
		return nil, fmt.Errorf("%w: malformed answer from %s", ErrBadCharter, p)
	}
	c, err := DecodeCharter(resp[1:])
	if err != nil {
		return nil, fmt.Errorf("charter from %s: %w", p, err)
	}
	if err := c.Verify(name, fp); err != nil {
		return nil, fmt.Errorf("charter from %s: %w", p, err)
	}
	return c, nil
}

// WithPinnedFounder pins the public swarm's founder: the node joins only
// members whose swarm charter id signed, and refuses to start when its
// data dir recorded another founder for the swarm. Without it the data
// dir's record (trust on first use) pins, if there is one.
func WithPinnedFounder(id peer.ID) Option {
	return func(c *config) error {
		if _, err := id.ExtractPublicKey(); err != nil {
			return fmt.Errorf("founder %q: not a peer ID with its public key: %w: %w", id, err, ErrConfig)
		}
		c.pinFounder = id
		return nil
	}
}

// WithFounder has the host found its public swarm: it signs the swarm's
// charter with its own key, so that joiners by name can tell its swarm
// from a rival founded under the same name.
func WithFounder() Option {
	return func(c *config) error { c.founder = true; return nil }
}

// pinRecord is one public swarm in the data dir's pin file.
type pinRecord struct {
	Swarm       string `json:"swarm"`
	Fingerprint string `json:"fingerprint"`
	Founder     string `json:"founder"`
}

// loadPin reads the founder recorded in dir for the swarm (""  when none).
func loadPin(dir, name, fp string) (peer.ID, error) {
	recs, err := readPins(dir)
	if err != nil {
		return "", err
	}
	for _, r := range recs {
		if r.Swarm == name && r.Fingerprint == fp {
			id, err := peer.Decode(r.Founder)
			if err != nil {
				return "", fmt.Errorf("%s: founder %q of swarm %q: %w: %w", filepath.Join(dir, pinFile), r.Founder, name, err, ErrConfig)
			}
			return id, nil
		}
	}
	return "", nil
}

func readPins(dir string) ([]pinRecord, error) {
	path := filepath.Join(dir, pinFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", path, err, ErrConfig)
	}
	var recs []pinRecord
	if err := json.Unmarshal(data, &recs); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", path, err, ErrConfig)
	}
	return recs, nil
}

// savePin records founder for the swarm in dir, replacing an older record.
func savePin(dir, name, fp string, founder peer.ID) error {
	recs, err := readPins(dir)
	if err != nil {
		return err
	}
	recs = slices.DeleteFunc(recs, func(r pinRecord) bool { return r.Swarm == name && r.Fingerprint == fp })
	recs = append(recs, pinRecord{Swarm: name, Fingerprint: fp, Founder: founder.String()})
	data, err := json.MarshalIndent(recs, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+pinFile+".tmp*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), filepath.Join(dir, pinFile))
}

// setupCharter fixes the host's pin and, for a founder, signs its charter.
func (d *publicDisc) setupCharter() error {
	c := d.h.cfg
	pin := c.pinFounder
	if c.dataDir != "" {
		rec, err := loadPin(c.dataDir, c.swarmName, d.fp)
		if err != nil {
			return err
		}
		switch {
		case rec != "" && pin != "" && rec != pin:
			return fmt.Errorf("%w: swarm %q is pinned to founder %s, but %s records founder %s, whose swarm this node joined before; "+
				"remove that record to trust another founder: %w",
				ErrFounderMismatch, c.swarmName, pin, filepath.Join(c.dataDir, pinFile), rec, ErrConfig)
		case pin == "" && rec != "":
			pin = rec
			d.pinFrom = "recorded in " + filepath.Join(c.dataDir, pinFile) + " when this node first joined; remove the record to trust another founder"
		}
	}
	if c.pinFounder != "" {
		d.pinFrom = "pinned with --swarm-founder"
	}
	self := d.h.h.ID()
	if c.founder {
		if pin != "" && pin != self {
			return fmt.Errorf("%w: this node founds swarm %q, but it is pinned to founder %s: %w", ErrFounderMismatch, c.swarmName, pin, ErrConfig)
		}
		ch, err := NewCharter(c.swarmName, d.fp, d.h.h.Peerstore().PrivKey(self))
		if err != nil {
			return err
		}
		d.charter.Store(ch)
		pin, d.pinFrom = self, "this node founded it"
		d.remember(self)
	}
	d.pin = pin
	return nil
}

// remember records founder in the data dir (trust on first use).
func (d *publicDisc) remember(founder peer.ID) {
	c := d.h.cfg
	if c.dataDir == "" {
		return
	}
	if err := savePin(c.dataDir, c.swarmName, d.fp, founder); err != nil {
		d.h.log.Warn("could not record the swarm's founder", zap.String("swarm", c.swarmName), zap.Error(err))
	}
}

// adopt makes ch the host's charter (the first one only) and records its
// founder.
func (d *publicDisc) adopt(ch *Charter) {
	if d.charter.CompareAndSwap(nil, ch) {
		d.remember(ch.Founder)
	}
}

// learnCharter has a member that joined without the lookup (through
// --bootstrap) take its swarm's charter from its bootstrap peers, whose
// swarm it joined (a rival's members may be among its other peers: the
// swarms share the name's topics), or, with none, from its live peers;
// false while none answered.
func (d *publicDisc) learnCharter(ctx context.Context) bool {
	if d.charter.Load() != nil {
		return true
	}
	var from []peer.ID
	for _, ai := range d.h.cfg.bootstrap {
		from = append(from, ai.ID)
	}
	if len(from) == 0 {
		for _, row := range d.h.table.Live() {
			from = append(from, row.ID)
		}
	}
	for _, p := range from {
		ch, err := FetchCharter(ctx, d.h.h, p, d.h.cfg.swarmName, d.fp)
		if err != nil {
			d.h.log.Debug("no charter from a peer", zap.Stringer("peer", p), zap.Error(err))
			continue
		}
		if d.pin != "" && ch.Founder != d.pin {
			d.h.log.Warn("a peer is in a swarm of another founder than pinned", zap.Stringer("peer", p),
				zap.Stringer("founder", ch.Founder), zap.Stringer("pinned", d.pin))
			continue
		}
		d.adopt(ch)
		return true
	}
	return false
}

// Charter is the founder-signed charter of the public swarm the host is
// in: its own as the founder, or the one the members it joined through
// served; nil before it has one or without WithPublicDHT.
func (s *Host) Charter() *Charter {
	if s.pub == nil {
		return nil
	}
	return s.pub.charter.Load()
}

// PinnedFounder is the founder the host's public swarm is pinned to
// (WithPinnedFounder, the data dir's record or its own founding); "" when
// none.
func (s *Host) PinnedFounder() peer.ID {
	if s.pub == nil {
		return ""
	}
	return s.pub.pin
}

// founderList writes founders and their member counts for an error.
func founderList(by map[peer.ID][]peer.AddrInfo) string {
	ids := make([]peer.ID, 0, len(by))
	for f := range by {
		ids = append(ids, f)
	}
	slices.Sort(ids)
	parts := make([]string, len(ids))
	for i, f := range ids {
		parts[i] = fmt.Sprintf("%s (%d members)", f, len(by[f]))
	}
	return strings.Join(parts, ", ")
}
