// Command converge-verifier runs the converge Verifier service on its own: Verify Done with evidence.
// It is configured by flags and CONVERGE_* environment; --help names both.
package main

import (
	"context"
	"os"
	"strconv"

	"github.com/spf13/pflag"

	verifierv1 "github.com/converge-dev/converge/gen/converge/verifier/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/servicecmd"
	"github.com/converge-dev/converge/services/verifier"
	"github.com/converge-dev/converge/services/verifier/store/postgres"
)

func main() { servicecmd.Main(module()) }

func module() servicecmd.Module {
	var (
		allowedRoots     []string
		scratchDir       string
		maxVerifications int
	)
	return servicecmd.Module{
		Name:   "verifier",
		Short:  "converge Verifier service: Verify Done with evidence",
		Listen: "127.0.0.1:7074",
		Needs:  servicecmd.NeedsPostgres,
		Bind: func(fs *pflag.FlagSet) {
			fs.StringArrayVar(&allowedRoots, "allowed-root", verifier.AllowedRootsFromEnv(),
				"directory whose subdirectories Verify may check as local_dir targets, repeatable; none: local_dir is refused ["+
					verifier.EnvAllowedRoots+", ':'-separated]")
			fs.StringVar(&scratchDir, "scratch-dir", os.Getenv("CONVERGE_VERIFIER_SCRATCH_DIR"),
				"where repository checkouts and command scratch directories go (default: the OS temporary directory) [CONVERGE_VERIFIER_SCRATCH_DIR]")
			fs.IntVar(&maxVerifications, "max-verifications", envInt("CONVERGE_VERIFIER_MAX_VERIFICATIONS", verifier.DefaultMaxVerifications),
				"verifications run at once; more answer ResourceExhausted [CONVERGE_VERIFIER_MAX_VERIFICATIONS]")
		},
		Build: func(ctx context.Context, rt servicecmd.Runtime) (servicecmd.Built, error) {
			st, err := postgres.New(ctx, rt.Flags.PostgresURL, database.WithLogger(rt.Logger))
			if err != nil {
				return servicecmd.Built{}, err
			}
			svc := verifier.New(st,
				verifier.WithAllowedRoots(allowedRoots...),
				verifier.WithScratchDir(scratchDir),
				verifier.WithMaxVerifications(maxVerifications),
				verifier.WithLogger(rt.Logger),
			)
			return servicecmd.Built{
				Desc:  &server.Service{Desc: &verifierv1.VerifierService_ServiceDesc, Impl: svc},
				Store: st,
				Close: func() { _ = st.Close() },
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
