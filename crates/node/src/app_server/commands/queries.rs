//! Queries answered with data in the Ack's payload.

use switchyard_core::GroupName;
use switchyard_service_protocol::{
    encode_group_member_page, Ack, AckStatus, GroupMember, GroupMemberQuery, ServiceMessage,
};

use super::AppServers;
use crate::app_server::ServerConnection;

/// Members per page when the query asks for fewer than one or more than this.
const MAX_PAGE: usize = 1000;

/// GroupMemberQuery: one page of the group's members, ordered by connection id.
pub(super) async fn group_members(
    app: &AppServers,
    connection: &ServerConnection,
    query: GroupMemberQuery,
) {
    let members = match GroupName::new(&query.group_name) {
        Ok(group) => {
            let max = usize::try_from(query.max).unwrap_or(0).clamp(1, MAX_PAGE);
            let after = query.continuation_token.as_deref();
            let mut members = app
                .executor
                .group_members(&connection.hub, &group, after, max + 1)
                .await;
            let more = members.len() > max;
            members.truncate(max);
            Some((members, more))
        }
        Err(_) => None,
    };
    let (members, more) = members.unwrap_or_default();
    let page: Vec<GroupMember<'_>> = members
        .iter()
        .map(|member| GroupMember {
            connection_id: member.connection.as_str(),
            user_id: member.user.as_ref().map(|user| user.as_str()),
        })
        .collect();
    let continuation = page.last().filter(|_| more).map(|last| last.connection_id);
    let mut answer = Ack::new(query.ack_id, AckStatus::Ok, "");
    answer.payload = Some(encode_group_member_page(&page, continuation));
    connection.send(&ServiceMessage::Ack(answer));
}
