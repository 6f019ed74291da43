package postgres

// SatisfyDependenciesSQL is SatisfyDependencies' statement, for its plan's test.
const SatisfyDependenciesSQL = satisfyDependenciesSQL

// HeldReadSQL and HeldCountSQL are the lock batch's reads of an execution's held assignments,
// for their plans' test.
var HeldReadSQL, HeldCountSQL = heldReadSQL, heldCountSQL
