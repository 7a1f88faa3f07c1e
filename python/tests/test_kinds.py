"""The method kinds the package lists are the command's (`uqbench methods --json`)."""

import uqbench


def test_method_kinds_equal_the_cli(cli):
    kinds = uqbench.method_kinds()
    assert kinds == cli("methods", "--json", json_out=True)
    names = {k["name"] for k in kinds}
    assert {"BLR", "Ens", "HMC", "Conformal", "EnsPrior", "DER"} <= names
    assert {k["room"] for k in kinds} == {"exact", "network", "sampler", "post-hoc"}
