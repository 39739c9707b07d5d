//! The payload of the Ack that answers a [`GroupMemberQuery`](crate::GroupMemberQuery).

use bytes::Bytes;

use crate::write::Out;

/// One group member as the query lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember<'a> {
    pub connection_id: &'a str,
    pub user_id: Option<&'a str>,
}

/// `[[[connectionId, userId|nil], …], continuationToken|nil]`: one page of members and the
/// token that asks for the next page (none on the last page).
pub fn encode_group_member_page(members: &[GroupMember<'_>], continuation: Option<&str>) -> Bytes {
    let mut buffer = Vec::with_capacity(16 + members.len() * 48);
    let mut out = Out(&mut buffer);
    out.array(2);
    out.array(members.len());
    for member in members {
        out.array(2);
        out.str(member.connection_id);
        match member.user_id {
            Some(user) => out.str(user),
            None => out.nil(),
        }
    }
    match continuation {
        Some(token) => out.str(token),
        None => out.nil(),
    }
    Bytes::from(buffer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_layout() {
        let page = encode_group_member_page(
            &[
                GroupMember {
                    connection_id: "a",
                    user_id: Some("u"),
                },
                GroupMember {
                    connection_id: "b",
                    user_id: None,
                },
            ],
            Some("b"),
        );
        assert_eq!(
            &page[..],
            &[0x92, 0x92, 0x92, 0xa1, b'a', 0xa1, b'u', 0x92, 0xa1, b'b', 0xc0, 0xa1, b'b']
        );
        assert_eq!(
            &encode_group_member_page(&[], None)[..],
            &[0x92, 0x90, 0xc0]
        );
    }
}
