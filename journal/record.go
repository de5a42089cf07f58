package journal

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"unicode/utf8"
)

// Subdirectories of INTERNAL.
const (
	StagingDir  = "staging"  // staging files of open writers
	UndoDir     = "undo"     // old bytes saved before an in-place commit
	RejectedDir = "rejected" // kept for humans; recovery never removes anything here
)

// internalName is INTERNAL's name in BACKING; no record may point into it.
const internalName = ".safefs"

// MaxTarget is the longest target path a record may carry: files whose
// path below BACKING is longer cannot be committed.
const MaxTarget = 4096 * 16

const (
	maxTarget = MaxTarget
	maxName   = 255 // NAME_MAX: a longer name would make every *at call fail
)

// Kind says how a commit changes its target.
type Kind string

const (
	Replace Kind = "replace" // rename of a staging file over the target
	Append  Kind = "append"  // bytes appended to the target in place
	InPlace Kind = "inplace" // target overwritten in place, old bytes in undo
	// RedoAppend is an append whose record carries its bytes (Data): a
	// kind of its own, so that a recovery that does not know it refuses
	// the record instead of cutting the committed bytes back.
	RedoAppend Kind = "redo"
)

// Record is the journal line written before a commit touches its target.
type Record struct {
	ID     uint64 `json:"id"`
	Kind   Kind   `json:"kind"`
	Target string `json:"target"`
	// TargetHex carries a Target that is not UTF-8 (file names are bytes;
	// JSON would silently replace the bad ones and name another file).
	TargetHex string `json:"target_hex,omitempty"`
	Staging   string `json:"staging,omitempty"`
	Dev       uint64 `json:"dev,omitempty"`
	Ino       uint64 `json:"ino,omitempty"`
	OldSize   int64  `json:"old_size,omitempty"`
	Len       int64  `json:"len,omitempty"`
	CRC       uint32 `json:"crc,omitempty"`
	Undo      string `json:"undo,omitempty"`
	UndoSize  int64  `json:"undo_size,omitempty"`
	UndoCRC   uint32 `json:"undo_crc,omitempty"`
	// Data is a small append's bytes (a redo record, docs/design.md "Crash
	// consistency"): durable with the record, so the appended bytes
	// need no fsync of their own and recovery writes them again.
	Data []byte `json:"data,omitempty"`
	// Rev is the commit lock's fencing token (cluster: the etcd lock
	// key's revision), for the operator: which grant made the commit.
	Rev int64 `json:"rev,omitempty"`
}

// Validate refuses records that recovery could not act on safely. It is
// applied on write and again on read, since the journal is not trusted.
func (r Record) Validate() error {
	if err := validTarget(r.Target); err != nil {
		return err
	}
	switch r.Kind {
	case Replace:
		return validName("staging", r.Staging)
	case Append:
		return r.validAppend()
	case RedoAppend:
		if err := r.validAppend(); err != nil {
			return err
		}
		return r.validRedo()
	case InPlace:
		return r.validInPlace()
	}
	return fmt.Errorf("unknown kind %q", r.Kind)
}

func (r Record) validAppend() error {
	if r.Ino == 0 {
		return errors.New("append without ino")
	}
	if r.OldSize < 0 || r.Len < 0 || r.OldSize > maxInt64-r.Len {
		return errors.New("append with bad size")
	}
	if r.Staging != "" {
		// Its pending bytes (cluster: see settleAppend).
		return validName("staging", r.Staging)
	}
	return nil
}

// Redo reports whether r is a redo record: an append carrying its bytes.
func (r Record) Redo() bool { return r.Kind == RedoAppend }

// MaxRedo bounds the bytes a redo record carries.
const MaxRedo = 64 << 10

func (r Record) validRedo() error {
	switch {
	case r.Staging != "":
		return errors.New("redo append with a staging file")
	case len(r.Data) == 0 || len(r.Data) > MaxRedo || int64(len(r.Data)) != r.Len:
		return errors.New("append data of bad length")
	case Checksum(r.Data) != r.CRC:
		return errors.New("append data does not match its CRC")
	}
	return nil
}

func (r Record) validInPlace() error {
	if r.Ino == 0 {
		return errors.New("inplace without ino")
	}
	if r.UndoSize < 0 {
		return errors.New("inplace with bad undo size")
	}
	return validName("undo", r.Undo)
}

const maxInt64 = 1<<63 - 1

func validTarget(t string) error {
	switch {
	case t == "" || t == ".":
		return errors.New("empty target")
	case len(t) > maxTarget:
		// The path of a very deep file: the caller gets ENAMETOOLONG.
		return fmt.Errorf("target too long: %w", syscall.ENAMETOOLONG)
	case filepath.IsAbs(t):
		return errors.New("absolute target")
	case filepath.Clean(t) != t:
		return errors.New("target not clean")
	case strings.ContainsRune(t, 0):
		return errors.New("NUL in target")
	}
	parts := strings.Split(t, "/")
	for _, p := range parts {
		if p == ".." {
			return errors.New("target leaves BACKING")
		}
	}
	if parts[0] == internalName {
		return errors.New("target inside INTERNAL")
	}
	return nil
}

func validName(what, n string) error {
	switch {
	case n == "":
		return fmt.Errorf("missing %s name", what)
	case n == "." || n == ".." || len(n) > maxName:
		return fmt.Errorf("bad %s name", what)
	case strings.ContainsAny(n, "/\x00") || !utf8.ValidString(n):
		return fmt.Errorf("bad %s name", what)
	}
	return nil
}

// endRecord finishes the Record with the same ID.
type endRecord struct {
	End     uint64 `json:"end"`
	Aborted bool   `json:"aborted,omitempty"`
}

// line is either a Record or an endRecord; End tells which.
type line struct {
	Record
	End     *uint64 `json:"end"`
	Aborted bool    `json:"aborted"`
}

// encodeLine frames v as "crc32c-hex SP json LF".
func encodeLine(v any) ([]byte, error) {
	if r, ok := v.(Record); ok && !utf8.ValidString(r.Target) {
		r.TargetHex, r.Target = hex.EncodeToString([]byte(r.Target)), ""
		v = r
	}
	js, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return fmt.Appendf(nil, "%08x %s\n", crc32c(js), js), nil
}

// decodeLine checks the frame of one line (without its LF) and decodes it.
func decodeLine(b []byte) (line, error) {
	var l line
	if len(b) < 10 || b[8] != ' ' {
		return l, errors.New("bad frame")
	}
	sum, ok := parseHex8(b[:8])
	if !ok {
		return l, errors.New("bad checksum field")
	}
	js := b[9:]
	if crc32c(js) != sum {
		return l, errors.New("checksum mismatch")
	}
	if id, aborted, ok := decodeEnd(js); ok {
		// Half the lines: read without the JSON decoder's garbage, which
		// a long journal would otherwise pile up faster than it is freed.
		l.End, l.Aborted = &id, aborted
		return l, nil
	}
	if err := json.Unmarshal(js, &l); err != nil {
		return l, fmt.Errorf("bad JSON: %w", err)
	}
	if l.TargetHex != "" {
		if l.Target != "" {
			return l, errors.New("both target and target_hex")
		}
		t, err := hex.DecodeString(l.TargetHex)
		if err != nil {
			return l, fmt.Errorf("bad target_hex: %w", err)
		}
		l.Target, l.TargetHex = string(t), ""
	}
	return l, nil
}

// decodeEnd reads exactly what encodeLine writes for an endRecord.
func decodeEnd(js []byte) (id uint64, aborted bool, ok bool) {
	rest, found := bytes.CutPrefix(js, []byte(`{"end":`))
	if !found {
		return 0, false, false
	}
	if r, found := bytes.CutSuffix(rest, []byte(`,"aborted":true}`)); found {
		rest, aborted = r, true
	} else if rest, found = bytes.CutSuffix(rest, []byte(`}`)); !found {
		return 0, false, false
	}
	if len(rest) == 0 || len(rest) > 20 || (rest[0] == '0' && len(rest) > 1) {
		return 0, false, false
	}
	for _, c := range rest {
		if c < '0' || c > '9' {
			return 0, false, false
		}
		if id > (1<<64-1-uint64(c-'0'))/10 {
			return 0, false, false
		}
		id = id*10 + uint64(c-'0')
	}
	return id, aborted, true
}

// parseHex8 accepts exactly what encodeLine writes: 8 lowercase hex digits.
func parseHex8(b []byte) (uint32, bool) {
	var v uint32
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint32(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint32(c-'a'+10)
		default:
			return 0, false
		}
	}
	return v, true
}
