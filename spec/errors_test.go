package spec

import (
	"errors"
	"fmt"
	"io"
	"testing"
)

func TestErrorCodes(t *testing.T) {
	// The well-known codes of spec section 5.
	for want, got := range map[uint]uint{
		1: ErrIncompatibleVersion, 2: ErrUnsupportedField, 3: ErrUnknownContainer,
		4: ErrInvalidEnvironment, 5: ErrIOFailure, 6: ErrDecodingFailure, 7: ErrInvalidNetworkConfig,
		11: ErrTryAgainLater, 50: ErrPluginNotAvailable, 51: ErrLimitedConnectivity, 100: FirstPluginSpecificCode,
	} {
		if got != want {
			t.Errorf("code constant %d != %d", got, want)
		}
	}
}

func TestErrorJSONShape(t *testing.T) {
	for _, code := range []uint{1, 2, 3, 4, 5, 6, 7, 11, 50, 51, 100, 4242} {
		e := NewError(code, "short", "longer text")
		assertJSON(t, e.Marshal(V110), fmt.Sprintf(`{"cniVersion":"1.1.0","code":%d,"msg":"short","details":"longer text"}`, code))
		back, ok := ParseError(e.Marshal(V040))
		if !ok || *back != (Error{CNIVersion: V040, Code: code, Msg: "short", Details: "longer text"}) {
			t.Errorf("ParseError = %+v %v", back, ok)
		}
	}
	// No details: the key is omitted; an explicit cniVersion is kept.
	e := Errorf(ErrInvalidNetworkConfig, "bad %s %d", "thing", 3)
	assertJSON(t, e.Marshal(V100), `{"cniVersion":"1.0.0","code":7,"msg":"bad thing 3"}`)
	e.CNIVersion = V031
	assertJSON(t, e.Marshal(V100), `{"cniVersion":"0.3.1","code":7,"msg":"bad thing 3"}`)
	if e.CNIVersion != V031 || e.Error() != "bad thing 3" {
		t.Errorf("Marshal changed the error: %+v", e)
	}
	if got := NewError(5, "a", "b").Error(); got != "a; b" {
		t.Errorf("Error() = %q", got)
	}
}

func TestParseError(t *testing.T) {
	for _, c := range []struct {
		data string
		ok   bool
		want Error
	}{
		{`{"cniVersion":"1.1.0","code":7,"msg":"Invalid Configuration","details":"Network 192.168.0.0/31 too small to allocate from."}`, true,
			Error{CNIVersion: "1.1.0", Code: 7, Msg: "Invalid Configuration", Details: "Network 192.168.0.0/31 too small to allocate from."}},
		{`{"code":150,"msg":"x"}`, true, Error{Code: 150, Msg: "x"}},
		{`{"code":0,"msg":"x"}`, false, Error{}},
		{`{"msg":"x"}`, false, Error{}},
		{`{"code":-1}`, false, Error{}},
		{`{"code":"7"}`, false, Error{}},
		{`{"cniVersion":"1.0.0","ips":[]}`, false, Error{}},
		{`not json`, false, Error{}},
		{``, false, Error{}},
	} {
		e, ok := ParseError([]byte(c.data))
		if ok != c.ok || (ok && *e != c.want) {
			t.Errorf("ParseError(%s) = %+v, %v", c.data, e, ok)
		}
	}
}

func TestAsError(t *testing.T) {
	if AsError(nil, 5) != nil {
		t.Error("AsError(nil) != nil")
	}
	base := NewError(ErrTryAgainLater, "busy", "lock held")
	if AsError(base, 5) != base {
		t.Error("a *Error is not returned as is")
	}
	wrapped := fmt.Errorf("setting up eth0: %w", base)
	twice := fmt.Errorf("ADD: %w", wrapped)
	for _, err := range []error{wrapped, twice} {
		ce := AsError(err, ErrInternal)
		if ce.Code != ErrTryAgainLater {
			t.Errorf("code = %d, want 11", ce.Code)
		}
		// The outer context is kept in the message.
		if ce.Msg != err.Error() || ce.Details != "" {
			t.Errorf("msg = %q details = %q", ce.Msg, ce.Details)
		}
		if !errors.Is(err, base) {
			t.Error("chain broken")
		}
	}
	if base.Msg != "busy" || base.Details != "lock held" {
		t.Error("AsError modified the wrapped error")
	}
	// A plain error gets the default code.
	ce := AsError(io.ErrUnexpectedEOF, ErrIOFailure)
	if ce.Code != ErrIOFailure || ce.Msg != io.ErrUnexpectedEOF.Error() {
		t.Errorf("%+v", ce)
	}
	// errors.Join keeps the first *Error's code.
	ce = AsError(errors.Join(io.EOF, Errorf(ErrUnknownContainer, "gone")), 5)
	if ce.Code != ErrUnknownContainer {
		t.Errorf("joined code = %d", ce.Code)
	}
}
