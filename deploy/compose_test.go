package deploy

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"
)

// convergeServices are the five services; with migrate they run converge images.
var convergeServices = []string{"scheduler", "registry", "knowledge", "verifier", "agent"}

// loadCompose loads compose/compose.yaml the way `docker compose` / `podman compose` would, with
// schema validation, interpolation from envFiles and the consistency checks on.
func loadCompose(t *testing.T, file string, envFiles ...string) (*types.Project, error) {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{file},
		cli.WithWorkingDirectory(filepath.Dir(file)),
		cli.WithEnvFiles(envFiles...),
		cli.WithDotEnv,
		cli.WithConsistency(true),
		cli.WithInterpolation(true),
		cli.WithNormalization(true),
		cli.WithResolvedPaths(true),
	)
	require.NoError(t, err)
	return opts.LoadProject(context.Background())
}

func TestComposeFileIsValid(t *testing.T) {
	t.Parallel()
	p, err := loadCompose(t, "compose/compose.yaml", "compose/.env.example")
	require.NoError(t, err)
	require.Equal(t, "converge", p.Name)
	require.ElementsMatch(t, append([]string{"postgres", "redis", "migrate"}, convergeServices...), p.ServiceNames())

	mig := p.Services["migrate"]
	require.Equal(t, types.ShellCommand{"migrate"}, mig.Command)
	require.Equal(t, "localhost/converge:dev", mig.Image)
	require.Equal(t, types.ServiceConditionHealthy, mig.DependsOn["postgres"].Condition)
	require.NotEmpty(t, *mig.Environment["CONVERGE_POSTGRES_URL"])

	for _, name := range convergeServices {
		s := p.Services[name]
		require.Equal(t, "localhost/converge-"+name+":dev", s.Image, name)
		require.NotNil(t, s.HealthCheck, name)
		want := types.HealthCheckTest{"CMD", "/usr/local/bin/converge-healthcheck"}
		if name == "agent" { // a string, run by the git base's shell (podman-compose 1.0 and replicas)
			want[0] = "CMD-SHELL"
		}
		require.Equal(t, want, s.HealthCheck.Test, name)
		require.Equal(t, "change-me-to-a-long-random-token", *s.Environment["CONVERGE_AUTH_TOKENS"], name)
		require.Equal(t, "change-me-to-a-long-random-token", *s.Environment["CONVERGE_TOKEN"], name)
		require.NotNil(t, s.StopGracePeriod, name)
		// Everything waits for the schema, directly or through a service that does.
		if _, direct := s.DependsOn["migrate"]; direct {
			require.Equal(t, types.ServiceConditionCompletedSuccessfully, s.DependsOn["migrate"].Condition, name)
		} else {
			require.Equal(t, "agent", name, "%s does not wait for migrate", name)
			require.Equal(t, types.ServiceConditionHealthy, s.DependsOn["scheduler"].Condition)
		}
	}
	for _, name := range []string{"scheduler", "registry", "knowledge", "verifier"} {
		require.Contains(t, *p.Services[name].Environment["CONVERGE_POSTGRES_URL"], "@postgres:5432/converge", name)
	}
	require.Equal(t, "redis://redis:6379/0", *p.Services["registry"].Environment["CONVERGE_REDIS_URL"])

	// Only the Scheduler is published: gRPC for converge run and grpcurl, and its dashboard.
	for name, s := range p.Services {
		if name == "scheduler" {
			require.Len(t, s.Ports, 2)
			require.Equal(t, uint32(7071), s.Ports[0].Target)
			require.Equal(t, "7071", s.Ports[0].Published)
			require.Equal(t, uint32(7080), s.Ports[1].Target)
			require.Equal(t, "7080", s.Ports[1].Published)
			require.Equal(t, "0.0.0.0:7080", *s.Environment["CONVERGE_DASHBOARD"])
			continue
		}
		require.Empty(t, s.Ports, name)
	}

	// The agent pool scales: no fixed name or port, a drain window inside the grace period.
	agent := p.Services["agent"]
	require.Empty(t, agent.ContainerName)
	require.Equal(t, "5m", *agent.Environment["CONVERGE_AGENT_DRAIN_TIMEOUT"])
	require.Greater(t, int64(*agent.StopGracePeriod), int64(5*60e9))
	scaled, err := p.WithServicesTransform(func(name string, s types.ServiceConfig) (types.ServiceConfig, error) {
		if name == "agent" {
			s.SetScale(3)
		}
		return s, nil
	})
	require.NoError(t, err)
	require.Equal(t, 3, *scaled.Services["agent"].Scale)

	// The Verifier may check what the Scheduler checks out: one volume, allowed as a root.
	workDir := *p.Services["scheduler"].Environment["CONVERGE_SCHEDULER_WORK_DIR"]
	require.Equal(t, workDir, *p.Services["verifier"].Environment["CONVERGE_VERIFIER_ALLOWED_ROOTS"])
	for _, name := range []string{"scheduler", "verifier"} {
		require.True(t, slices.ContainsFunc(p.Services[name].Volumes, func(v types.ServiceVolumeConfig) bool {
			return v.Source == "verify-work" && v.Target == workDir
		}), name)
	}
}

// TestComposeNeedsTokens: without a .env the file refuses to load rather than start services with
// empty tokens.
func TestComposeNeedsTokens(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	copyFile(t, "compose/compose.yaml", filepath.Join(dir, "compose.yaml"))
	_, err := loadCompose(t, filepath.Join(dir, "compose.yaml"))
	require.Error(t, err)
	require.Regexp(t, `set (CONVERGE_AUTH_TOKENS|CONVERGE_TOKEN|POSTGRES_PASSWORD) in \.env`, err.Error())
}

// TestComposeSchemaValidationIsOn: the loader used above rejects what the Compose schema does not
// know, so TestComposeFileIsValid is a schema check and not only a YAML parse.
func TestComposeSchemaValidationIsOn(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	raw, err := os.ReadFile("compose/compose.yaml")
	require.NoError(t, err)
	bad := strings.Replace(string(raw), "    stop_grace_period: 330s\n", "    stop_grace_period: 330s\n    replicass: 3\n", 1)
	require.NotEqual(t, string(raw), bad)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "compose.yaml"), []byte(bad), 0o600))
	copyFile(t, "compose/.env.example", filepath.Join(dir, ".env"))
	_, err = loadCompose(t, filepath.Join(dir, "compose.yaml"))
	require.ErrorContains(t, err, "replicass")
}

// TestComposeImagesAreBuilt: every converge image the compose file names is a target of the
// Containerfiles that `make images` builds.
func TestComposeImagesAreBuilt(t *testing.T) {
	t.Parallel()
	targets := containerfileTargets(t)
	p, err := loadCompose(t, "compose/compose.yaml", "compose/.env.example")
	require.NoError(t, err)
	for name, s := range p.Services {
		if !strings.HasPrefix(s.Image, "localhost/converge") {
			continue
		}
		target := strings.TrimPrefix(strings.TrimSuffix(s.Image, ":dev"), "localhost/converge-")
		if target == "localhost/converge" {
			target = "converge"
		}
		require.Contains(t, targets, target, "%s: image %s", name, s.Image)
	}
}

// containerfileTargets answers the build targets (FROM ... AS name) of images/Containerfile*.
func containerfileTargets(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("images/Containerfile*")
	require.NoError(t, err)
	re := regexp.MustCompile(`(?m)^FROM \S+ AS (\S+)$`)
	var out []string
	for _, f := range files {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range re.FindAllStringSubmatch(string(raw), -1) {
			out = append(out, m[1])
		}
	}
	return out
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	raw, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, raw, 0o600))
}
