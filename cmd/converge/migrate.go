package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"
)

func migrateCommand() *cobra.Command {
	var (
		postgresURL string
		dataDir     string
		services    []string
		status      bool
	)
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the services' schema migrations to Postgres (--postgres-url) or to converge dev's SQLite files (--data-dir)",
		Long: "converge migrate applies every stateful service's pending migrations, each recorded in its own " +
			"version table (converge_<service>_migrations), so the services can share one Postgres database. " +
			"Concurrent runs are safe: Postgres migrations take an advisory lock. --status only reports.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (postgresURL == "") == (dataDir == "") {
				return fmt.Errorf("give exactly one of --postgres-url and --data-dir")
			}
			for _, s := range services {
				if !slices.Contains(stateful, s) {
					return fmt.Errorf("--service %q: want one of %v", s, stateful)
				}
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
			defer cancel()
			open := func(service string) (migrator, error) {
				if postgresURL != "" {
					return openPostgres(ctx, service, postgresURL)
				}
				return openSQLite(ctx, service, dataDir)
			}
			return runMigrate(ctx, cmd.OutOrStdout(), services, status, open)
		},
	}
	cmd.Flags().StringVar(&postgresURL, "postgres-url", os.Getenv("CONVERGE_POSTGRES_URL"), "Postgres URL [CONVERGE_POSTGRES_URL]")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "converge dev's data directory (SQLite files)")
	cmd.Flags().StringSliceVar(&services, "service", stateful, "services to migrate")
	cmd.Flags().BoolVar(&status, "status", false, "report applied and pending migrations; change nothing")
	return cmd
}

// runMigrate migrates (or, with status, reports) each service and prints one line per migration.
func runMigrate(ctx context.Context, out io.Writer, services []string, status bool, open func(string) (migrator, error)) error {
	for _, service := range services {
		st, err := open(service)
		if err != nil {
			return fmt.Errorf("%s: %w", service, err)
		}
		err = func() error {
			defer st.Close()
			if !status {
				if err := st.Migrate(ctx); err != nil {
					return err
				}
			}
			migrations, err := st.MigrationStatus(ctx)
			if err != nil {
				return err
			}
			for _, m := range migrations {
				state := "pending"
				if m.Applied {
					state = "applied " + m.AppliedAt.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(out, "%-10s %s  %s\n", service, m.Name, state)
			}
			return nil
		}()
		if err != nil {
			return fmt.Errorf("%s: %w", service, err)
		}
	}
	return nil
}
