package main

import (
	"testing"

	"github.com/patchbay-cni/patchbay/internal/testutil"
)

// TestMain: the harness tests run no plugin, but keep them isolated like
// every package's (testutil.Main).
func TestMain(m *testing.M) { testutil.Main(m) }
