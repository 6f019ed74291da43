package knowledge

import (
	"context"

	knowledgev1 "github.com/converge-dev/converge/gen/converge/knowledge/v1"
	"github.com/converge-dev/converge/platform/database"
	"github.com/converge-dev/converge/platform/server"
	"github.com/converge-dev/converge/platform/servicecmd"
	"github.com/converge-dev/converge/services/knowledge/store"
	"github.com/converge-dev/converge/services/knowledge/store/postgres"
	"github.com/converge-dev/converge/services/knowledge/store/sqlite"
)

// Module is the Knowledge service as converge's binaries serve it: converge-knowledge on Postgres,
// converge dev on SQLite.
func Module() servicecmd.Module {
	return servicecmd.Module{
		Name:   "knowledge",
		Short:  "converge Knowledge service: the gotcha knowledge base",
		Listen: "127.0.0.1:7073",
		Needs:  servicecmd.NeedsPostgres,
		Build: func(ctx context.Context, rt servicecmd.Runtime) (servicecmd.Built, error) {
			var (
				st interface {
					store.Store
					servicecmd.Store
				}
				err error
			)
			if e := rt.Embedded; e != nil {
				st, err = sqlite.New(ctx, e.SQLite, database.WithLogger(rt.Logger), database.WithMigrate())
			} else {
				st, err = postgres.New(ctx, rt.Flags.PostgresURL, database.WithLogger(rt.Logger))
			}
			if err != nil {
				return servicecmd.Built{}, err
			}
			srv := New(st)
			return servicecmd.Built{
				Desc:  &server.Service{Desc: &knowledgev1.KnowledgeService_ServiceDesc, Impl: srv},
				Store: st,
				// Hits are written every second, and the last ones when the store closes, after
				// the server stopped.
				Start: srv.Start,
				Close: func() { _ = st.Close() },
			}, nil
		},
	}
}
