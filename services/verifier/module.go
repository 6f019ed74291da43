package verifier

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/auth"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/netguard"
	"github.com/converge-dev/converge/platform/proc"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/servicecmd"
	"github.com/converge-dev/converge/services/verifier/store"
	"github.com/converge-dev/converge/services/verifier/store/postgres"
	"github.com/converge-dev/converge/services/verifier/store/sqlite"
)

// Module is the Verifier service as converge's binaries serve it: converge-verifier on Postgres
// with its own flags, converge dev on SQLite with the process's roots.
func Module() servicecmd.Module {
	var (
		allowedRoots     []string
		scratchDir       string
		maxVerifications int
		allowEnv         []string
		commandChecks    bool
		commandRole      string
		allowDest        []string
		sandboxMode      string
		sandboxUID       int
		outputMemory     int64
		maxVerifyTime    time.Duration
	)
	return servicecmd.Module{
		Name:        "verifier",
		Short:       "converge Verifier service: Verify Done with evidence",
		Listen:      "127.0.0.1:7074",
		Needs:       servicecmd.NeedsPostgres,
		DurationEnv: map[string]string{"max-verification-time": "CONVERGE_VERIFIER_MAX_VERIFICATION_TIME"},
		Bind: func(fs *pflag.FlagSet) {
			fs.StringArrayVar(&allowedRoots, "allowed-root", AllowedRootsFromEnv(),
				"directory whose subdirectories Verify may check as local_dir targets, repeatable; none: local_dir is refused ["+
					EnvAllowedRoots+", ':'-separated]")
			fs.StringVar(&scratchDir, "scratch-dir", os.Getenv("CONVERGE_VERIFIER_SCRATCH_DIR"),
				"where repository checkouts and command scratch directories go (default: the OS temporary directory) [CONVERGE_VERIFIER_SCRATCH_DIR]")
			fs.IntVar(&maxVerifications, "max-verifications", envInt("CONVERGE_VERIFIER_MAX_VERIFICATIONS", DefaultMaxVerifications),
				"verifications run at once; more answer ResourceExhausted [CONVERGE_VERIFIER_MAX_VERIFICATIONS]")
			fs.StringSliceVar(&allowEnv, "allow-env", splitEnvList(EnvAllowEnv),
				"name of a verifier environment variable checks may read (env_passthrough, header_env, metadata_env), repeatable; "+
					"none by default, CONVERGE_* never; its value is redacted from reports ["+EnvAllowEnv+", comma-separated]")
			fs.BoolVar(&commandChecks, "allow-command-checks", envBool("CONVERGE_VERIFIER_ALLOW_COMMAND_CHECKS", true),
				"run command checks (they run the caller's commands on this host, sandboxed where it can); false refuses them [CONVERGE_VERIFIER_ALLOW_COMMAND_CHECKS]")
			fs.StringVar(&commandRole, "command-check-role", os.Getenv("CONVERGE_VERIFIER_COMMAND_CHECK_ROLE"),
				"role a caller must hold for command checks (e.g. operator); empty: any authenticated caller [CONVERGE_VERIFIER_COMMAND_CHECK_ROLE]")
			fs.StringSliceVar(&allowDest, "allow-destination", splitEnvList(EnvAllowDestinations),
				"destination http and grpc checks and git targets may connect to although it is loopback, link-local, cloud metadata or private: "+
					"a CIDR, an address or a host name, optionally :port (only that port), or loopback, private, link-local, all; repeatable. "+
					"Public addresses are always allowed; e.g. the Scheduler's --git-url host:port ["+EnvAllowDestinations+", comma-separated]")
			fs.StringVar(&sandboxMode, "sandbox", envOr("CONVERGE_VERIFIER_SANDBOX", "auto"),
				"confine command checks: auto (another uid, user/PID/mount namespaces and a cgroup per check, as far as the host allows; "+
					"the start-up log says what is not isolated) or off [CONVERGE_VERIFIER_SANDBOX]")
			fs.IntVar(&sandboxUID, "sandbox-uid", envInt("CONVERGE_VERIFIER_SANDBOX_UID", 65534),
				"host uid and gid command checks run as when the verifier runs as root; -1: the verifier's own [CONVERGE_VERIFIER_SANDBOX_UID]")
			fs.Int64Var(&outputMemory, "output-memory", int64(envInt("CONVERGE_VERIFIER_OUTPUT_MEMORY", DefaultOutputMemory)),
				"bytes of memory the output of all running command checks may take together; beyond it output goes to files under --scratch-dir [CONVERGE_VERIFIER_OUTPUT_MEMORY]")
			fs.DurationVar(&maxVerifyTime, "max-verification-time", DefaultMaxVerificationTime,
				"longest a verification may run (checkout and checks); past it its checks are killed and it answers DeadlineExceeded [CONVERGE_VERIFIER_MAX_VERIFICATION_TIME]")
		},
		Check: func() error {
			if sandboxMode != "auto" && sandboxMode != "off" {
				return fmt.Errorf("--sandbox %q: want auto or off", sandboxMode)
			}
			if _, err := netguard.Parse(allowDest); err != nil {
				return err
			}
			return CheckAllowedEnv(allowEnv)
		},
		Build: func(ctx context.Context, rt servicecmd.Runtime) (servicecmd.Built, error) {
			var (
				st interface {
					store.Store
					servicecmd.Store
				}
				err          error
				opts         = []Option{WithLogger(rt.Logger)}
				cgroupParent string // the sandbox's, when it has one
			)
			if e := rt.Embedded; e != nil {
				allowEnv = splitEnvList(EnvAllowEnv)
				if err := CheckAllowedEnv(allowEnv); err != nil {
					return servicecmd.Built{}, err
				}
				// converge dev checks the user's own apps on their own machine: loopback and
				// private addresses are allowed, link-local and metadata endpoints are not
				// (unless CONVERGE_VERIFIER_ALLOW_DESTINATIONS says so).
				dest, derr := netguard.Parse(append([]string{"loopback", "private"}, splitEnvList(EnvAllowDestinations)...))
				if derr != nil {
					return servicecmd.Built{}, derr
				}
				opts = append(opts, WithAllowedEnv(allowEnv...), WithDestinations(dest))
				st, err = sqlite.New(ctx, e.SQLite, database.WithLogger(rt.Logger), database.WithMigrate())
				opts = append(opts, WithAllowedRoots(append(append([]string{}, e.AllowedRoots...), e.WorkDir)...))
			} else {
				st, err = postgres.New(ctx, rt.Flags.PostgresURL, database.WithLogger(rt.Logger))
				opts = append(opts, WithAllowedRoots(allowedRoots...), WithScratchDir(scratchDir),
					WithMaxVerifications(maxVerifications), WithAllowedEnv(allowEnv...), WithCommandChecks(commandChecks),
					WithCommandCheckRole(auth.Role(commandRole)), WithOutputMemory(outputMemory), WithMaxVerificationTime(maxVerifyTime))
				dest, derr := netguard.Parse(allowDest)
				if derr != nil {
					return servicecmd.Built{}, derr
				}
				opts = append(opts, WithDestinations(dest))
				if sandboxMode == "auto" {
					sb, rep := proc.DetectSandbox(ctx, sandboxUID, sandboxUID, "converge-verifier")
					cgroupParent = sb.CgroupParent
					rt.Logger.Info("command checks run sandboxed", "uid", sb.UID, "namespaces", sb.Namespaces,
						"cgroup", sb.CgroupParent, "init", rep.Init, "isolation", rep.String())
					opts = append(opts, WithSandbox(sb))
				} else {
					rt.Logger.Warn("command checks run unsandboxed (--sandbox=off): as the verifier's user, with access to what it can read")
				}
			}
			if err != nil {
				return servicecmd.Built{}, err
			}
			return servicecmd.Built{
				Desc:  &server.Service{Desc: &verifierv1.VerifierService_ServiceDesc, Impl: New(st, opts...)},
				Store: st,
				Close: func() {
					_ = st.Close()
					// The emptied run cgroups kept for the next checks (platform/proc).
					proc.ReleaseCgroups(cgroupParent)
				},
			}, nil
		},
	}
}

// envInt reads an integer from the environment, or def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return n
	}
	return def
}

// EnvAllowEnv names the variable listing the verifier's variables checks may read.
const EnvAllowEnv = "CONVERGE_VERIFIER_ALLOW_ENV"

// EnvAllowDestinations names the variable listing the destinations allowed beyond the public ones.
const EnvAllowDestinations = "CONVERGE_VERIFIER_ALLOW_DESTINATIONS"

// splitEnvList reads a comma-separated list from the environment.
func splitEnvList(name string) []string {
	var out []string
	for _, s := range strings.Split(os.Getenv(name), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// envBool reads a boolean from the environment, or def.
func envBool(name string, def bool) bool {
	if b, err := strconv.ParseBool(os.Getenv(name)); err == nil {
		return b
	}
	return def
}

// envOr reads a string from the environment, or def.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}
