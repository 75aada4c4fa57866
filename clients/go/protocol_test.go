package concurrency

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// The statements come from clients/protocol/statements.json: the generated
// copy (protocol_gen.go) is up to date, and no statement text is left in the
// package's own files.
func TestProtocolIsGenerated(t *testing.T) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: clients/protocol/generate.py --check not run")
	}
	for _, script := range [][]string{{"generate.py", "--check"}, {"check_sources.py", "go"}} {
		cmd := exec.Command(python, append([]string{filepath.Join("..", "protocol", script[0])}, script[1:]...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", script, err, out)
		}
	}
}
