package spec

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Well-known error codes (CNI spec §5 "Error"). 100 and above are plugin-specific.
const (
	ErrIncompatibleVersion  uint = 1
	ErrUnsupportedField     uint = 2
	ErrUnknownContainer     uint = 3
	ErrInvalidEnvironment   uint = 4
	ErrIOFailure            uint = 5
	ErrDecodingFailure      uint = 6
	ErrInvalidNetworkConfig uint = 7
	ErrTryAgainLater        uint = 11
	ErrPluginNotAvailable   uint = 50
	ErrLimitedConnectivity  uint = 51
	ErrInternal             uint = 999 // used by runtimes/SDK when a plugin gave no structured error
	FirstPluginSpecificCode uint = 100
)

// Error is the CNI error result: {cniVersion, code, msg, details}.
type Error struct {
	CNIVersion string `json:"cniVersion,omitempty"`
	Code       uint   `json:"code"`
	Msg        string `json:"msg"`
	Details    string `json:"details,omitempty"`
}

func (e *Error) Error() string {
	if e.Details == "" {
		return e.Msg
	}
	return e.Msg + "; " + e.Details
}

// Errorf builds an *Error with the given code and a formatted message.
func Errorf(code uint, format string, a ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, a...)}
}

// NewError builds an *Error with message and details.
func NewError(code uint, msg, details string) *Error {
	return &Error{Code: code, Msg: msg, Details: details}
}

// AsError converts any error into a *Error. An *Error anywhere in the chain
// keeps its code, and the message keeps the outer context (it usually names
// what was being done). Any other error gets defaultCode.
func AsError(err error, defaultCode uint) *Error {
	if err == nil {
		return nil
	}
	var ce *Error
	if errors.As(err, &ce) {
		if ce == err {
			return ce
		}
		out := *ce
		// Keep the wrapping context: it usually names what was being done.
		if msg := err.Error(); msg != ce.Error() {
			out.Msg = msg
			out.Details = ""
		}
		return &out
	}
	return &Error{Code: defaultCode, Msg: err.Error()}
}

// Marshal encodes the error with cniVersion set to version.
func (e *Error) Marshal(version string) []byte {
	out := *e
	if out.CNIVersion == "" {
		out.CNIVersion = version
	}
	b, _ := json.Marshal(&out)
	return b
}

// ParseError decodes an error result; ok is false if data is not one
// (no "code" key or code 0).
func ParseError(data []byte) (*Error, bool) {
	var e struct {
		CNIVersion string `json:"cniVersion"`
		Code       *uint  `json:"code"`
		Msg        string `json:"msg"`
		Details    string `json:"details"`
	}
	if err := json.Unmarshal(data, &e); err != nil || e.Code == nil || *e.Code == 0 {
		return nil, false
	}
	return &Error{CNIVersion: e.CNIVersion, Code: *e.Code, Msg: e.Msg, Details: e.Details}, true
}
