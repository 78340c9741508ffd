package bandwidth

import (
	"bytes"
	"encoding/json"
	"math"
	"math/bits"
	"strconv"

	"github.com/vishvananda/netlink"

	"github.com/patchbay-cni/patchbay/internal/confcheck"
	"github.com/patchbay-cni/patchbay/internal/link"
	"github.com/patchbay-cni/patchbay/skel"
	"github.com/patchbay-cni/patchbay/spec"
)

// latencyUs is how long a packet may wait behind the bucket: it sizes the
// tbf's queue (the reference's fixed 25 ms).
const latencyUs = 25000

// entry is one set of the four keys, as the config or the bandwidth
// capability (runtimeConfig.bandwidth) gives them. Values stay raw until
// parsed, so that a bad one gets code 7 naming its key.
type entry struct {
	IngressRate  json.RawMessage `json:"ingressRate"`
	IngressBurst json.RawMessage `json:"ingressBurst"`
	EgressRate   json.RawMessage `json:"egressRate"`
	EgressBurst  json.RawMessage `json:"egressBurst"`
}

type netConf struct {
	entry
	RuntimeConfig struct {
		Bandwidth json.RawMessage `json:"bandwidth"`
	} `json:"runtimeConfig"`
}

// shape is one direction's token bucket, in the kernel's units.
type shape struct {
	rateKey, burstKey   string // the keys it came from, for messages
	rateBits, burstBits uint64
	rate                uint64 // bytes per second
	burst               uint32 // bytes
	limit               uint32 // bytes queued behind the bucket
	// buffer is the bucket as ticks of sending time (what the reference
	// sends); wide means that time does not fit 32 bits of ticks, and the
	// bucket goes to the kernel as bytes (TCA_TBF_BURST) instead.
	buffer uint32
	wide   bool
}

// tbf is the qdisc for this shape on a link.
func (s *shape) tbf(linkIndex int) link.Tbf {
	t := link.Tbf{LinkIndex: linkIndex, Rate: s.rate, Limit: s.limit, Buffer: s.buffer}
	if s.wide {
		t.Burst = s.burst
	}
	return t
}

// reportedBuffer is the buffer (ticks) the kernel reports for this shape.
func (s *shape) reportedBuffer() uint32 {
	if s.wide {
		return link.KernelTbfTicks(s.rate, s.burst)
	}
	return s.buffer
}

// config is the effective configuration: nil shapes are unshaped.
type config struct {
	name            string
	ingress, egress *shape
}

func (c *config) shaped() bool { return c.ingress != nil || c.egress != nil }

func invalid(format string, a ...any) error {
	return spec.Errorf(spec.ErrInvalidNetworkConfig, format, a...)
}

// load decodes and validates the configuration. The bandwidth capability
// (runtimeConfig.bandwidth), when given, replaces the four config keys as
// a whole: it is the runtime's per-container setting.
func load(a *skel.CmdArgs) (*config, error) {
	var n netConf
	if err := a.DecodeConf(&n); err != nil {
		return nil, err
	}
	return parse(a.Conf.Name, &n)
}

func parse(name string, n *netConf) (*config, error) {
	e, prefix := &n.entry, ""
	if rc := n.RuntimeConfig.Bandwidth; !confcheck.Absent(rc) {
		var r entry
		if err := json.Unmarshal(rc, &r); err != nil {
			return nil, invalid("runtimeConfig.bandwidth must be an object with ingressRate, ingressBurst, egressRate, egressBurst (numbers): %v", err)
		}
		e, prefix = &r, "runtimeConfig.bandwidth."
	}
	c := &config{name: name}
	var err error
	if c.ingress, err = parseShape(prefix+"ingressRate", e.IngressRate, prefix+"ingressBurst", e.IngressBurst); err != nil {
		return nil, err
	}
	if c.egress, err = parseShape(prefix+"egressRate", e.EgressRate, prefix+"egressBurst", e.EgressBurst); err != nil {
		return nil, err
	}
	return c, nil
}

// bitsValue parses a rate or burst: a JSON whole number from 0 to 2^64-1
// (absent and null are 0), as the reference's uint64 fields take them.
func bitsValue(key string, raw json.RawMessage) (uint64, error) {
	if confcheck.Absent(raw) {
		return 0, nil
	}
	s := string(bytes.TrimSpace(raw))
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, invalid("%s %s is not a whole number from 0 to %d", key, s, uint64(math.MaxUint64))
	}
	return v, nil
}

// parseShape checks one direction's rate and burst and computes its tbf
// the way the reference does, refusing what the kernel's fields cannot
// hold instead of letting it wrap.
func parseShape(rateKey string, rawRate json.RawMessage, burstKey string, rawBurst json.RawMessage) (*shape, error) {
	rate, err := bitsValue(rateKey, rawRate)
	if err != nil {
		return nil, err
	}
	burst, err := bitsValue(burstKey, rawBurst)
	if err != nil {
		return nil, err
	}
	switch {
	case rate == 0 && burst == 0:
		return nil, nil
	case burst == 0:
		return nil, invalid("%s is %d but %s is not set: a rate needs a burst (bits)", rateKey, rate, burstKey)
	case rate == 0:
		return nil, invalid("%s is %d but %s is not set: a burst needs a rate (bits per second)", burstKey, burst, rateKey)
	case burst/8 >= math.MaxUint32:
		return nil, invalid("%s %d is too large: the burst must be less than 4 GiB (%d bits)", burstKey, burst, uint64(math.MaxUint32)*8)
	case rate < 8:
		return nil, invalid("%s %d is too small: the kernel shapes in bytes per second (8 bits per second at least)", rateKey, rate)
	case burst < 8:
		return nil, invalid("%s %d is too small: the bucket holds whole bytes (8 bits at least)", burstKey, burst)
	}
	s := &shape{rateKey: rateKey, burstKey: burstKey, rateBits: rate, burstBits: burst, rate: rate / 8, burst: uint32(burst / 8)}
	// The queue: what arrives in latencyUs at the rate, plus the bucket.
	queue := math.Floor(float64(s.rate) * latencyUs / netlink.TIME_UNITS_PER_SEC)
	if queue+float64(s.burst) > math.MaxUint32 {
		return nil, invalid("%s %d with %s %d needs a queue of %.0f bytes (%d µs at the rate plus the burst), more than the kernel's 32-bit limit",
			rateKey, rate, burstKey, burst, queue+float64(s.burst), latencyUs)
	}
	s.limit = uint32(queue) + s.burst
	// The bucket as sending time: whole microseconds, then ticks (the
	// reference's arithmetic, so the kernel state is the same as its).
	us := math.Floor(float64(s.burst) * netlink.TIME_UNITS_PER_SEC / float64(s.rate))
	ticks := math.Floor(us * netlink.TickInUsec())
	if us > math.MaxUint32 || ticks > math.MaxUint32 {
		s.wide = true
	} else {
		s.buffer = uint32(ticks)
		// The kernel turns the ticks back into bytes and refuses an empty
		// bucket.
		if hi, lo := bits.Mul64(uint64(s.buffer)<<6, s.rate); hi == 0 && lo < 1e9 {
			return nil, invalid("%s %d is too small for %s %d: the bucket would hold less than one byte", burstKey, burst, rateKey, rate)
		}
	}
	return s, nil
}
