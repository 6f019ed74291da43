package postgres

// SatisfyDependenciesSQL is SatisfyDependencies' statement, for its plan's test.
const SatisfyDependenciesSQL = satisfyDependenciesSQL
