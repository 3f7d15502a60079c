// dsl-ir
