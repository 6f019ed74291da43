package security

// Findings 2 and 6 for checks, and 7 for the Verifier: a command check ran as the server's user,
// read /proc/$PPID/environ (the server's tokens and database URL), left setsid children running
// after its timeout, and 64 checks of big output took the server to gigabytes. Against the real
// converge-verifier (run as root here: the sandbox is user + PID + mount namespaces, uid 65534, a
// cgroup per check; docs/security.md says what holds on hosts without them).

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
)

func TestVerifierCommandChecksCannotReadTheServersEnvironment(t *testing.T) {
	t.Parallel()
	v := startVerifier(t, nil)
	pid := v.proc.Pid()
	res, err := v.client.Verify(t.Context(), v.request("environ", shell(fmt.Sprintf(
		`echo "ppid=$PPID uid=$(id -u)"; cat /proc/$PPID/environ; cat /proc/%d/environ; `+
			`for p in /proc/[0-9]*; do tr '\0' '\n' < $p/environ; done; env; ls /proc | grep -cE '^[0-9]+$'; exit 1`, pid))))
	require.NoError(t, err)
	js, err := protojson.Marshal(res.GetReport())
	require.NoError(t, err)
	require.NotContains(t, string(js), verifierToken, "the server's token")
	require.NotContains(t, string(js), v.pgURL, "the server's database URL")
	require.NotContains(t, string(js), "CONVERGE_", "none of the server's settings")
	out := res.GetReport().GetResults()[0].GetEvidence().GetCommand().GetStdoutTail()
	require.Contains(t, out, "ppid=0", "the check is alone in its PID namespace: %s", out)
	if os.Geteuid() == 0 {
		// Root in its namespace, uid 65534 on the host: files it makes say so.
		res, err = v.client.Verify(t.Context(), v.request("uid", shell("mkdir -p made && touch made/x")))
		require.NoError(t, err)
		require.Equal(t, verifierv1.CriterionStatus_CRITERION_STATUS_FAIL, res.GetReport().GetResults()[0].GetStatus(),
			"the target (root's, 0755) is not writable by the sandbox user")
	}
}

func TestVerifierKillsASetsidChildOfACheckAtItsTimeout(t *testing.T) {
	t.Parallel()
	v := startVerifier(t, nil)
	marker := strconv.Itoa(7000000 + os.Getpid())
	c := shell(`setsid sleep ` + marker + ` </dev/null >/dev/null 2>&1 & sleep 600`)
	c.GetCommand().Timeout = durationpb.New(2 * time.Second)
	res, err := v.client.Verify(t.Context(), v.request("setsid", c))
	require.NoError(t, err)
	require.True(t, res.GetReport().GetResults()[0].GetEvidence().GetCommand().GetTimedOut())
	require.Eventually(t, func() bool { return !processWith(marker) }, 10*time.Second, 20*time.Millisecond,
		"the setsid child is dead after the check's timeout")
}

// 64 checks, each printing 2×48 MiB with a 16 MiB cap, all at once: the server keeps within its
// output budget (32 MiB here) plus its own working set, instead of 64×2×16 MiB.
func TestVerifierOutputStaysWithinItsBudget(t *testing.T) {
	t.Parallel()
	v := startVerifier(t, nil, "--output-memory", strconv.Itoa(32<<20))
	var crit []*verifierv1.Criterion
	for i := range 64 {
		c := shell(`head -c 50331648 /dev/zero | tr '\0' x; head -c 50331648 /dev/zero | tr '\0' y >&2; echo; echo done`)
		c.Id = fmt.Sprintf("B%d", i)
		c.GetCommand().Expect = &verifierv1.CommandExpectation{Stdout: &verifierv1.TextExpectation{Contains: []string{"done"}}}
		crit = append(crit, c)
	}
	req := v.request("budget", crit...)
	req.Parallelism = 64
	req.OutputCapBytes = 16 << 20
	res, err := v.client.Verify(t.Context(), req)
	require.NoError(t, err)
	for _, r := range res.GetReport().GetResults() {
		require.Equal(t, verifierv1.CriterionStatus_CRITERION_STATUS_PASS, r.GetStatus(), "%v", r)
	}
	hwm := peakRSS(t, v.proc.Pid())
	t.Logf("verifier peak RSS %d MiB for 64 checks × 2 × 48 MiB (16 MiB cap, 32 MiB budget)", hwm>>20)
	require.Less(t, hwm, int64(400<<20), "peak RSS %d MiB: output is bounded by the budget, not 64 × 32 MiB", hwm>>20)
}

// peakRSS answers a process's peak resident set (VmHWM).
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// processWith reports whether a live process's command line holds marker.
func processWith(marker string) bool {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(b, []byte(marker)) {
			continue
		}
		st, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if i := bytes.LastIndexByte(st, ')'); i > 0 && bytes.HasPrefix(bytes.TrimSpace(st[i+1:]), []byte("Z")) {
			continue
		}
		return true
	}
	return false
}
