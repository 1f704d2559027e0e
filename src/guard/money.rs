//! Which argument of a tool is money, as the tools file names it
//! (`amount = { field = "amount_p", currency = "GBP", minor_unit = 2 }`), so that the
//! pages show `amount_p: 2500` as £25.00. Presentation only: the guard never reads it;
//! `web::filters::money` writes the amount.

/// The money field of a tool's arguments (and of its result, when the provider echoes
/// it): an integer count of the currency's minor unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoneyField {
    /// The top-level argument holding the amount (`amount_p`).
    pub field: String,
    /// ISO 4217 code, three capital letters (`GBP`).
    pub currency: String,
    /// Digits after the decimal point: 2 for pence and cents, 0 for yen.
    pub minor_unit: u8,
}

/// The largest `minor_unit` a tools file may give (ISO 4217's largest is 4).
pub(crate) const MAX_MINOR_UNIT: u8 = 4;

impl MoneyField {
    /// Checks a tools file's values; the error names the part that is wrong.
    pub fn new(field: String, currency: String, minor_unit: u8) -> Result<Self, String> {
        if field.is_empty() || field.len() > 512 {
            return Err(format!(
                "amount.field {field:?} must be non-empty and at most 512 bytes"
            ));
        }
        if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(format!(
                "amount.currency {currency:?} must be an ISO 4217 code: three capital letters such as \"GBP\""
            ));
        }
        if minor_unit > MAX_MINOR_UNIT {
            return Err(format!(
                "amount.minor_unit {minor_unit} must be 0 to {MAX_MINOR_UNIT} (2 for pence or cents)"
            ));
        }
        Ok(Self {
            field,
            currency,
            minor_unit,
        })
    }

    /// The amount in `args`, in minor units, or `None` when the field is missing or
    /// not an integer. `web::filters::money` writes it as money.
    pub(crate) fn minor_units(&self, args: &serde_json::Value) -> Option<i64> {
        args.get(&self.field)?.as_i64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn money(currency: &str, minor_unit: u8) -> MoneyField {
        MoneyField::new("amount_p".into(), currency.into(), minor_unit).unwrap()
    }

    #[test]
    fn an_amount_is_read_from_the_named_field_only_when_it_is_an_integer() {
        let m = money("GBP", 2);
        assert_eq!(
            m.minor_units(&serde_json::json!({"amount_p": 4500})),
            Some(4500)
        );
        assert_eq!(
            m.minor_units(&serde_json::json!({"amount_p": "4500"})),
            None
        );
        assert_eq!(m.minor_units(&serde_json::json!({"amount": 4500})), None);
    }

    #[test]
    fn a_bad_money_field_is_refused_by_name() {
        assert!(
            MoneyField::new("".into(), "GBP".into(), 2)
                .unwrap_err()
                .contains("amount.field")
        );
        assert!(
            MoneyField::new("a".into(), "gbp".into(), 2)
                .unwrap_err()
                .contains("amount.currency")
        );
        assert!(
            MoneyField::new("a".into(), "GBP".into(), 9)
                .unwrap_err()
                .contains("amount.minor_unit")
        );
    }
}
