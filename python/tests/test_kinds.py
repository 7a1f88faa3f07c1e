"""The method kinds and the metric catalogue the package lists are the commands'
(`uqbench methods --json`, `uqbench metrics --catalogue`)."""

import uqbench


def test_method_kinds_equal_the_cli(cli):
    kinds = uqbench.method_kinds()
    assert kinds == cli("methods", "--json", json_out=True)
    names = {k["name"] for k in kinds}
    assert {"BLR", "Ens", "HMC", "Conformal", "EnsPrior", "DER"} <= names
    assert {k["room"] for k in kinds} == {"exact", "network", "sampler", "post-hoc"}


def test_metric_catalogue_equals_the_cli(cli):
    catalogue = uqbench.metric_catalogue()
    assert catalogue == cli("metrics", "--catalogue", json_out=True)
    joint = [m for m in catalogue if m["name"] == "joint_kl"]
    assert len(joint) == 1 and joint[0]["index"] == "tau" and joint[0]["better"] == "lower"
