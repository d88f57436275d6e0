"""Fitted or not: a GPU type whose efficiency terms are the EfficiencySpec priors (its catalog entry has no
fitted block: ``source`` "defaults (not fitted)", what plan-estimate prints) is priced on priors. Its points are
marked (FrontPoint.fitted False) with the band the leave-one-GPU-out error implies (:data:`UNFITTED_BAND`), and
the search does not recommend it over a fitted type unless asked (``allow_unfitted``)."""

from __future__ import annotations

#: EfficiencySpec.source of a GPU type without fitted terms (hardware/spec.py; a framework's family prior over
#: such a type carries it inside its own source).
UNFITTED_SOURCE = "defaults (not fitted)"

#: Leave-one-GPU-out median |error| of the MoE step times per GPU type held out of the fit (its terms taken from
#: the other fitted types): python bench/moe_fidelity.py --logo, as recorded in bench/moe_fidelity.py's notes on
#: the fit kept on 2026-12-01 ("LOGO b200 7.9%, b300 20.1%, gb200 8.0%, gb300 13.3%, h100 23.9%, h800 5.6%").
LOGO_MEDIANS = {"b200": 0.079, "b300": 0.201, "gb200-nvl72": 0.080, "gb300-nvl72": 0.133, "h100-sxm": 0.239,
                "h800": 0.056}
#: The relative band (+-) of the figures of a GPU type priced on priors: the largest of LOGO_MEDIANS. A type with
#: no fitted terms at all is further from the fit than a held-out one (whose die has fitted siblings): the band
#: is a floor on its error, not a bound.
UNFITTED_BAND = max(LOGO_MEDIANS.values())


def is_fitted(cluster) -> bool:
    """Whether ``cluster``'s efficiency terms were fitted on measured runs (not the priors)."""
    return UNFITTED_SOURCE not in (cluster.efficiency.source or "")
